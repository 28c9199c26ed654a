"""Builds hvd/torch/_tensorinfo.cpp (the C fast path's reader of torch's
tensors) into PKGDIR/hvd/torch/ for the torch this Python imports:
`python3 python/build_tensorinfo.py PKGDIR [CXX]` (`make python` and the
e2e tests run it). `--check` instead of PKGDIR only says whether it can be
built here (`make torch` and .ci/run install libtorch-dev when not).

Exit status 0: built; 3: not possible here (torch not importable, or its
C++ headers missing: Debian's libtorch-dev), with the reason on stderr; any
other: the compiler failed (its output on stderr)."""
import os
import subprocess
import sys
import sysconfig

NOT_HERE = 3


def flags():
    """The compiler flags for this Python's torch, or exits NOT_HERE."""
    try:
        import torch
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    except Exception as e:  # not installed, or broken
        print('no usable torch for %s: %s' % (sys.executable, e), file=sys.stderr)
        sys.exit(NOT_HERE)
    d = os.path.dirname(torch.__file__)
    inc, lib = os.path.join(d, 'include'), os.path.join(d, 'lib')
    header = os.path.join(inc, 'torch', 'csrc', 'autograd', 'python_variable.h')
    if not os.path.exists(header):
        print('no torch C++ headers (%s; Debian: apt-get install libtorch-dev)' % header, file=sys.stderr)
        sys.exit(NOT_HERE)
    return ['-I' + inc, '-I' + os.path.join(inc, 'torch', 'csrc', 'api', 'include'),
            '-I' + sysconfig.get_paths()['include'],
            '-D_GLIBCXX_USE_CXX11_ABI=%d' % abi,
            '-L' + lib, '-Wl,-rpath,' + lib, '-lc10', '-ltorch_python']


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    if sys.argv[1] == '--check':
        flags()  # exits NOT_HERE when it cannot be built
        return
    pkg = sys.argv[1]
    cxx = sys.argv[2] if len(sys.argv) == 3 else os.environ.get('CXX', 'c++')
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'hvd', 'torch', '_tensorinfo.cpp')
    out = os.path.join(pkg, 'hvd', 'torch', '_tensorinfo' + sysconfig.get_config_var('EXT_SUFFIX'))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [cxx, '-O2', '-shared', '-fPIC', '-std=c++17', '-w', src] + flags() + ['-o', out]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:  # no compiler
        print('cannot run the C++ compiler %s: %s' % (cxx, e), file=sys.stderr)
        sys.exit(NOT_HERE)
    if r.returncode != 0:
        sys.stderr.write(' '.join(cmd) + '\n' + r.stdout.decode('utf-8', 'replace'))
        sys.exit(1)


if __name__ == '__main__':
    main()
