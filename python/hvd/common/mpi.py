"""hvd under MPI (docs/mpi.md): the store bootstrap over mpi4py, the world
from an mpi4py communicator or a rank list, and process sets from
communicators.

hvd's own data plane does not need MPI; MPI only tells the ranks where
rank 0's rendezvous store is. Under ``mpirun python3 train.py`` with no
store variable set, hvd.init() (when mpi4py is importable) lets rank 0 of
the world communicator pick a free port, then broadcasts rank 0's address,
the port and a fresh job secret over that communicator; the library is
started with HVD_MPI_STORE_ADDR (rank 0 serves the store there),
HVD_MPI_RANK/HVD_MPI_SIZE (the communicator's rank and size) and
HVD_SECRET_KEY set for the duration of the call (sdk/rendezvous/mpi.go reads
them), and the environment is restored after.

mpi4py is imported only under an MPI launch (OMPI_COMM_WORLD_* or PMI_*
variables) or when the caller passes a communicator. A script that set
mpi4py.rc.initialize = False (as Horovod's tests do) leaves MPI's
initialisation to the library: hvd then initialises it, with
MPI_THREAD_MULTIPLE, and finalises it at exit (after hvd's own shutdown),
only then: MPI that the script or mpi4py initialised is theirs to finalise.
"""
import atexit
import os
import secrets
import socket
import struct
import sys

# Variables that give the rendezvous store's address.
STORE_VARS = ('HOROVOD_GLOO_RENDEZVOUS_ADDR', 'HOROVOD_GLOO_RENDEZVOUS_PORT', 'MASTER_ADDR', 'MASTER_PORT')
# Identity sources that win over MPI's (sdk/rendezvous/IDENTITY.md).
_BEFORE_MPI = ('HOROVOD_RANK', 'HOROVOD_SIZE', 'RANK', 'WORLD_SIZE')
def _set(env, name):
    return env.get(name, '').strip() != ''


def mpi_launch(env=None):
    """The MPI world size when the identity comes from MPI's variables
    (mpirun from Open MPI, or MPICH/Hydra), else 0."""
    env = os.environ if env is None else env
    if any(_set(env, v) for v in _BEFORE_MPI):
        return 0
    for var in ('OMPI_COMM_WORLD_SIZE', 'PMI_SIZE'):
        if _set(env, var):
            try:
                return int(env[var])
            except ValueError:
                return 0  # the library names the bad value
    return 0


def needs_bootstrap(env=None):
    """Whether the library would need MPI to find its store: an MPI launch
    of more than one process with no store variable set."""
    env = os.environ if env is None else env
    return mpi_launch(env) > 1 and not any(_set(env, v) for v in STORE_VARS)


def import_mpi(why):
    """mpi4py's MPI module; ImportError saying what to install when it is
    missing."""
    if 'mpi4py.MPI' not in sys.modules:
        # Open MPI's SIGSEGV/SIGBUS handlers would replace those of the Go
        # runtime already loaded with libhvd.so (as when the library
        # initializes MPI itself, backends/mpi).
        os.environ.setdefault('OMPI_MCA_opal_signal', '')
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError('hvd: %s needs mpi4py, which cannot be imported here (%s): apt-get install python3-mpi4py, '
                          'or pip install mpi4py (built against the MPI that mpirun comes from)' % (why, e)) from e
    _ensure_initialized(MPI, why)
    return MPI


# True once hvd has initialised MPI itself (and registered its finalize).
_initialized_here = [False]


def _ensure_initialized(MPI, why):
    """Initialises MPI when nobody has (mpi4py.rc.initialize = False), as
    Horovod's MPIContext does: MPI_Init_thread asking for
    MPI_THREAD_MULTIPLE (the MPI data plane calls MPI from every set's
    goroutine; the bootstrap needs less), and MPI_Finalize at exit."""
    if MPI.Is_initialized():
        return
    if MPI.Is_finalized():
        raise RuntimeError('hvd: %s needs MPI, but MPI was already finalized in this process (MPI cannot be '
                           'initialised twice); call hvd.init before MPI.Finalize' % why)
    MPI.Init_thread(MPI.THREAD_MULTIPLE)
    _initialized_here[0] = True
    atexit.register(_finalize)  # before init registers shutdown: atexit is LIFO, so MPI outlives hvd


def _finalize():
    from mpi4py import MPI
    if not MPI.Is_finalized():
        MPI.Finalize()


def abort_at_exit(comm, failure):
    """Registers an exit handler (run before hvd's shutdown and before
    MPI_Finalize: atexit is LIFO, and mpi4py finalizes after every atexit
    handler) that calls MPI_Abort on comm when failure() returns a message:
    a peer failed (dead, stopped, unreachable), and MPI_Finalize would wait
    for it forever, so mpirun would never end the job. Says so on stderr;
    the exit status is 1."""
    def _abort():
        why = failure()
        if not why:
            return
        sys.stderr.write('%s\nhvd: calling MPI_Abort: a peer failed (above), and MPI_Finalize at exit would wait '
                         'for it; mpirun ends the job\n' % why)
        sys.stderr.flush()
        comm.Abort(1)
    atexit.register(_abort)


def initialized_mpi():
    """Whether hvd initialised MPI in this process (and so finalises it at
    exit)."""
    return _initialized_here[0]


def is_comm(obj):
    """Whether obj is an mpi4py communicator (without importing mpi4py when
    the caller never did)."""
    return type(obj).__module__.startswith('mpi4py') and hasattr(obj, 'Get_group')


def world_from(comm):
    """The communicator that is hvd's world for hvd.init(comm=comm):
    returns (mpi_comm or None, ranks or None). comm: None, an mpi4py
    communicator, or a list of MPI_COMM_WORLD ranks (Horovod's meaning; the
    world is those processes in the list's order). (None, None): no MPI
    involved (the library finds the world in the environment as usual).
    ValueError for a process outside comm."""
    if comm is None or (isinstance(comm, (list, tuple)) and len(comm) == 0):
        if needs_bootstrap():
            try:
                MPI = import_mpi('starting under mpirun without a rendezvous store address')
            except ImportError:
                return None, None  # the library's error says every way out
            return MPI.COMM_WORLD, None
        return None, None
    if isinstance(comm, (list, tuple)):
        ranks = [int(r) for r in comm]
        n = mpi_launch()
        if n <= 1:
            return None, ranks  # not under MPI: basics checks the list against the world
        if len(set(ranks)) != len(ranks) or any(r < 0 or r >= n for r in ranks):
            raise ValueError('hvd.init(comm=%r): want distinct MPI_COMM_WORLD ranks in [0, %d)' % (list(comm), n))
        MPI = import_mpi('hvd.init(comm=[ranks]) under mpirun')
        world = MPI.COMM_WORLD
        if ranks == list(range(world.size)):
            return world, ranks
        if world.rank not in ranks:
            raise ValueError('hvd.init(comm=%r): this process (MPI_COMM_WORLD rank %d) is not one of the ranks '
                             'given, so it is not part of the hvd world; call hvd.init only on those ranks, or '
                             'include this one' % (ranks, world.rank))
        group = world.Get_group().Incl(ranks)
        try:
            sub = world.Create_group(group)
        finally:
            group.Free()
        return sub, ranks
    if not is_comm(comm):
        raise ValueError('hvd.init(comm=%r): want None, a list of MPI_COMM_WORLD ranks or an mpi4py communicator'
                         % (comm,))
    MPI = import_mpi('hvd.init(comm=<mpi4py communicator>)')
    if comm == MPI.COMM_NULL:
        raise ValueError('hvd.init(comm=MPI.COMM_NULL): this process is not a member of the communicator '
                         '(Split/Create_group gave it COMM_NULL); call hvd.init only on its members')
    if not isinstance(comm, MPI.Intracomm) or comm.Is_inter():
        raise ValueError('hvd.init(comm=%r): want an intra-communicator' % (comm,))
    return comm, None


def _ipv4_of(ifname):
    import fcntl
    import struct
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack('256s', ifname.encode()[:15]))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None
    finally:
        s.close()


def _my_ipv4s():
    out = []
    for _, name in socket.if_nameindex():
        ip = _ipv4_of(name)
        if ip and not ip.startswith('127.'):
            out.append(ip)
    return out


def _route_source(dest):
    """This host's address on the route to dest (no packet is sent)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((dest, 9))
        return s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()


def _free_port(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _host_key():
    """This host as the library tells hosts apart (sdk/rendezvous HostKey):
    the host name and the network namespace, so that network namespaces
    that share a host name (containers, the e2e tests) count as hosts."""
    try:
        ns = os.readlink('/proc/self/ns/net')
    except OSError:
        ns = ''
    return socket.gethostname() + '|' + ns


def _store_host(everyone):
    """Rank 0's address as the others can dial it, from every member's
    (host key, IPv4 addresses): loopback when every member is on rank 0's
    host; HOROVOD_GLOO_IFACE's address when set; else the address rank 0's
    kernel uses towards the first member on another host."""
    host0 = everyone[0][0]
    others = [ips for name, ips in everyone[1:] if name != host0]
    if not others:
        return '127.0.0.1'
    iface = os.environ.get('HOROVOD_GLOO_IFACE', '').strip()
    if iface:
        ip = _ipv4_of(iface)
        if ip:
            return ip
    for ips in others:
        for ip in ips:
            src = _route_source(ip)
            if src and not src.startswith('127.'):
                return src
    return (everyone[0][1] or ['127.0.0.1'])[0]


def bootstrap_env(comm):
    """The variables the library starts with so that comm's processes make
    the hvd world in comm's rank order (collective over comm): rank and size,
    hints for the local rank and size (members with this host key), rank 0's
    store address and a job secret, broadcast over comm. Host keys, not
    MPI_COMM_TYPE_SHARED: Open MPI takes network namespaces that share a
    host name for one node."""
    everyone = comm.allgather((_host_key(), _my_ipv4s()))
    msg = None
    if comm.rank == 0:
        host = _store_host(everyone)
        port = _free_port('' if host != '127.0.0.1' else host)
        secret = os.environ.get('HVD_SECRET_KEY', '').strip() or secrets.token_hex(32)
        msg = (host, port, secret)
    host, port, secret = comm.bcast(msg, root=0)
    mine = everyone[comm.rank][0]
    local_rank = sum(1 for key, _ in everyone[:comm.rank] if key == mine)
    local_size = sum(1 for key, _ in everyone if key == mine)
    env = {v: None for v in _BEFORE_MPI + STORE_VARS + ('TORCHELASTIC_USE_AGENT_STORE',)}
    env.update({
        'HVD_MPI_RANK': str(comm.rank), 'HVD_MPI_SIZE': str(comm.size),
        'HVD_MPI_LOCAL_RANK': str(local_rank), 'HVD_MPI_LOCAL_SIZE': str(local_size),
        'HVD_MPI_STORE_ADDR': '%s:%d' % (host, port), 'HVD_SECRET_KEY': secret,
    })
    if not (_set(os.environ, 'OMPI_COMM_WORLD_SIZE') or _set(os.environ, 'PMI_SIZE')):
        # MPI started without mpirun's variables (a singleton, another
        # launcher): the library reads an MPI identity from PMI_*.
        env.update({'PMI_RANK': str(comm.rank), 'PMI_SIZE': str(comm.size)})
    return env


class environment:
    """Sets (value) or unsets (None) variables for the duration of a with
    block, then restores them."""

    def __init__(self, values):
        self.values = values or {}
        self.saved = {}

    def __enter__(self):
        for k, v in self.values.items():
            self.saved[k] = os.environ.get(k)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False


def translate(comm, world):
    """comm's members as ranks of world (sorted); ValueError when one is not
    in world."""
    MPI = import_mpi('hvd.ProcessSet(<mpi4py communicator>)')
    if comm == MPI.COMM_NULL:
        return None
    ranks = MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.size)), world.Get_group())
    if any(r == MPI.UNDEFINED for r in ranks):
        raise ValueError('hvd: a process set communicator (%r) holds processes outside the hvd world; build it from '
                         'the communicator passed to hvd.init (or MPI_COMM_WORLD)' % (comm,))
    return sorted(int(r) for r in ranks)


def comm_sets(comms, world):
    """The process sets that the communicators comms (one per
    ProcessSet(mpi_comm), passed by every member of world in the same order)
    stand for, as Horovod collects them: for each, every member's
    communicator translated to world ranks, gathered over world, distinct
    sets in sorted order. Returns (sets in registration order, this
    process's ranks for each comm)."""
    out, mine = [], []
    for c in comms:
        ranks = translate(c, world)
        mine.append(ranks)
        gathered = world.allgather(ranks)
        out.extend(sorted(set(tuple(g) for g in gathered if g)))
    return [list(s) for s in out], mine


def needed_libraries(path):
    """The DT_NEEDED entries of the ELF shared library at path (64-bit
    little-endian), [] when it cannot be read."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError:
        return []
    try:
        if data[:4] != b'\x7fELF' or data[4] != 2 or data[5] != 1:
            return []
        shoff, = struct.unpack_from('<Q', data, 0x28)
        shentsize, shnum = struct.unpack_from('<HH', data, 0x3A)
        sections = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize) for i in range(shnum)]
        dynamic = [sh for sh in sections if sh[1] == 6]  # SHT_DYNAMIC
        if not dynamic:
            return []
        dyn = dynamic[0]
        strtab = sections[dyn[6]]  # sh_link: the string table of its entries
        out = []
        for off in range(dyn[4], dyn[4] + dyn[5], 16):
            tag, val = struct.unpack_from('<qQ', data, off)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                start = strtab[4] + val
                out.append(data[start:data.index(b'\0', start)].decode())
        return out
    except (struct.error, IndexError, ValueError):
        return []


_built = {}


def lib_built_with_mpi(path):
    """Whether the libhvd.so at path is the MPI build (it links libmpi)."""
    if path not in _built:
        _built[path] = any(n.startswith('libmpi.so') for n in needed_libraries(path))
    return _built[path]
