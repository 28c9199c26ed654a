/* hvd.common._fastpath: the per-op calls of a batch of async allreduces
 * (issue 27), in C instead of ctypes and Python frames.
 *
 * Built by `make python` when Python's headers are there; hvd.common.fastpath
 * loads it and falls back to the pure-Python path when it is missing or
 * HVD_PY_FASTPATH=0. It does not link libhvd.so: setup() receives the
 * addresses of the library's functions (from ctypes) and the Python objects
 * it needs (the handle table, the torch types and dtype codes).
 *
 * allreduce(tensor, in_place, sync, average, name, op, prescale, postscale,
 *           process_set, priority[, out])
 *   The in-place allreduce of a plain tensor, or with out (a plain tensor
 *   the caller made with torch.empty_like(tensor)), the synchronous
 *   allreduce of tensor into out (in_place false, sync true; returns out)
 *   -- exactly the cases
 *   hvd.torch.tensors._fast_args accepts: a torch.Tensor or Parameter (not
 *   a subclass) on the CPU, strided and contiguous, of a supported dtype;
 *   average None; op None or a reduce op other than Adasum; int or float
 *   scale factors; a registered ProcessSet; an int32 priority; a str or
 *   None name. Returns None when the arguments are not such a case (the
 *   caller takes the general path, which checks and raises), the handle
 *   (async) or the tensor (sync) on success, and (code, message) when the
 *   library refused the op (the caller raises it as the ctypes path does).
 *
 * synchronize(handle)
 *   hvd.common.handles.synchronize for a handle whose op succeeded: waits
 *   (without the GIL), takes the result, drops the handle from the table
 *   and releases it in the library. Returns NotImplemented when the op
 *   failed, without touching the handle (the caller's general path waits
 *   again, raises the op's error and releases it), and None for a handle
 *   not in the table (as synchronize does).
 *   For an in-place op it waits with hvd_wait_reap, passing the handles
 *   this module issued and nobody synchronized yet: the library releases
 *   every one of them that has completed successfully in the same call,
 *   and they go into handles.reaped, so that their own synchronize (here
 *   or in Python) returns at once without calling the library. A batch of
 *   N async allreduces is then synchronized with one call instead of 2N.
 *
 * setup's last two arguments (optional): the capsule of a framework's
 *   tensor reader (hvd.torch._tensorinfo) and its table from the reader's
 *   scalar types to dtype codes. With them allreduce() learns a tensor's
 *   dtype, device, layout, contiguity, shape and address in one C call
 *   instead of six Python attribute calls.
 *
 * entry(kind, fallback, default_process_set, raise_refused)
 *   A callable that is hvd.torch's allreduce_async_ ("allreduce_async_"),
 *   allreduce_ ("allreduce_") or synchronize ("synchronize") itself, so
 *   that a call costs no Python frame: it parses Horovod's signature
 *   (tensor, average=None, name=None, op=None, prescale_factor=1.0,
 *   postscale_factor=1.0, process_set=default, priority=0), or takes the
 *   handle, and calls allreduce() or synchronize() above. Whatever those
 *   decline, and any call they cannot parse (an unknown keyword, too many
 *   arguments), goes to fallback with the same arguments: the Python
 *   function, which checks and raises. A refused op is raised with
 *   raise_refused((code, message)). The caller copies the fallback's name,
 *   documentation and signature onto it (functools.update_wrapper); it
 *   pickles by reference, as a function does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

/* libhvd.h's prototypes */
typedef int64_t (*async_fn)(void *in, void *out, int32_t dtype, int64_t *shape, int64_t ndim, int32_t op,
                            double pre, double post, int32_t set, char *name, int32_t prio, char *err, int64_t errlen);
typedef int32_t (*sync_fn)(void *in, void *out, int32_t dtype, int64_t *shape, int64_t ndim, int32_t op,
                           double pre, double post, int32_t set, char *name, int32_t prio, char *err, int64_t errlen);
typedef int32_t (*handle_fn)(int64_t handle, char *err, int64_t errlen);
typedef int32_t (*reap_fn)(int64_t handle, int64_t *cands, int64_t ncands, int64_t *reaped, int64_t cap, char *err,
                           int64_t errlen);

#define ERR_LEN 4096
#define MAX_DIMS 64

static async_fn f_async;
static sync_fn f_sync;
static handle_fn f_wait, f_release;
static reap_fn f_reap;
/* hvd.torch._tensorinfo's reader (see there): 1 with the fields of a
 * contiguous strided CPU tensor, 0 for anything else. */
typedef int (*info_fn)(PyObject *t, int *scalar_type, int64_t *dims, int maxdims, int *ndim, void **data);
#define INFO_CAPSULE "hvd.torch._tensorinfo.info"
#define MAX_SCALAR_TYPES 64
static info_fn f_info;
static int info_codes[MAX_SCALAR_TYPES]; /* scalar type -> dtype code, -1: unsupported */
static PyObject *handle_map, *reaped_set, *tensor_type, *param_type, *pset_type, *dtypes, *strided, *fast_ops;
static long average_op;
static PyObject *s_dtype, *s_is_cpu, *s_layout, *s_is_contiguous, *s_data_ptr, *s_shape, *s_set_id;
static __thread char errbuf[ERR_LEN];

/* Set in a child forked after setup (a DataLoader worker): the library's Go
 * runtime did not survive the fork, so every call here hands over to the
 * general path, whose library stand-in raises (hvd.common.loader) instead
 * of hanging in a dead runtime. */
static volatile int forked;

static void after_fork_in_child(void) { forked = 1; }

/* The handles allreduce() issued that no synchronize() here has seen yet
 * (changed with the GIL held only): hvd_wait_reap's candidates. Ids that
 * left the handle table another way (the Python path synchronized them)
 * are dropped when the list is compacted. */
static int64_t *pending;
static Py_ssize_t npending, cap_pending;

/* Drops from pending every id no longer in the handle table or already
 * reaped; -1 with an error set on failure. */
static int compact_pending(void) {
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < npending; i++) {
        PyObject *id = PyLong_FromLongLong(pending[i]);
        if (id == NULL)
            return -1;
        int in_map = PyDict_Contains(handle_map, id);
        int done = in_map == 1 ? PySet_Contains(reaped_set, id) : 0;
        Py_DECREF(id);
        if (in_map < 0 || done < 0)
            return -1;
        if (in_map == 1 && done == 0)
            pending[j++] = pending[i];
    }
    npending = j;
    return 0;
}

/* Appends h to pending (compacting a long list first, so that handles
 * synchronized elsewhere do not accumulate); -1 with an error set. */
static int pending_add(int64_t h) {
    if (npending == cap_pending && npending >= 1024 && compact_pending() < 0)
        return -1;
    if (npending == cap_pending) {
        Py_ssize_t cap = cap_pending ? 2 * cap_pending : 256;
        int64_t *p = PyMem_RawRealloc(pending, (size_t)cap * sizeof(int64_t));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        pending = p;
        cap_pending = cap;
    }
    pending[npending++] = h;
    return 0;
}

static PyObject *setup(PyObject *self, PyObject *args) {
    unsigned long long a_async, a_sync, a_wait, a_release, a_reap;
    PyObject *hm, *rs, *tt, *pt, *ps, *dt, *st, *ops, *cap = Py_None, *table = NULL;
    if (!PyArg_ParseTuple(args, "KKKKKO!O!OOOO!OO!l|OO!", &a_async, &a_sync, &a_wait, &a_release, &a_reap,
                          &PyDict_Type, &hm, &PySet_Type, &rs, &tt, &pt, &ps, &PyDict_Type, &dt, &st, &PyTuple_Type,
                          &ops, &average_op, &cap, &PyTuple_Type, &table))
        return NULL;
    /* The framework's tensor reader and its scalar-type table, or none. */
    info_fn info = NULL;
    int codes[MAX_SCALAR_TYPES];
    if (cap != Py_None) {
        info = (info_fn)PyCapsule_GetPointer(cap, INFO_CAPSULE);
        if (info == NULL)
            return NULL;
        Py_ssize_t n = table == NULL ? 0 : PyTuple_GET_SIZE(table);
        if (n > MAX_SCALAR_TYPES) {
            PyErr_SetString(PyExc_ValueError, "_fastpath.setup: scalar-type table too long");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < MAX_SCALAR_TYPES; i++) {
            long c = -1;
            if (i < n) {
                c = PyLong_AsLong(PyTuple_GET_ITEM(table, i));
                if (c == -1 && PyErr_Occurred())
                    return NULL;
            }
            codes[i] = (int)c;
        }
    }
    static int atfork;
    if (!atfork && pthread_atfork(NULL, NULL, after_fork_in_child) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "_fastpath: pthread_atfork failed");
        return NULL;
    }
    atfork = 1;
    f_async = (async_fn)(uintptr_t)a_async;
    f_sync = (sync_fn)(uintptr_t)a_sync;
    f_wait = (handle_fn)(uintptr_t)a_wait;
    f_release = (handle_fn)(uintptr_t)a_release;
    f_reap = (reap_fn)(uintptr_t)a_reap;
    f_info = info;
    if (info != NULL)
        memcpy(info_codes, codes, sizeof(codes));
    PyObject **slots[] = {&handle_map, &reaped_set, &tensor_type, &param_type, &pset_type, &dtypes, &strided, &fast_ops};
    PyObject *vals[] = {hm, rs, tt, pt, ps, dt, st, ops};
    for (int i = 0; i < 8; i++) {
        Py_INCREF(vals[i]);
        Py_XSETREF(*slots[i], vals[i]);
    }
    Py_RETURN_NONE;
}

/* 1 when x is an exact int or float (not bool), with its value in *v. */
static int real(PyObject *x, double *v) {
    if (PyFloat_CheckExact(x)) {
        *v = PyFloat_AS_DOUBLE(x);
        return 1;
    }
    if (PyLong_CheckExact(x)) {
        *v = PyLong_AsDouble(x);
        if (*v == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return 1;
    }
    return 0;
}

/* An exact int in [lo, hi] into *v; 0 otherwise (no error set). */
static int bounded(PyObject *x, long long lo, long long hi, long long *v) {
    if (!PyLong_CheckExact(x))
        return 0;
    int overflow = 0;
    *v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow || (*v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return lo <= *v && *v <= hi;
}

/* o.name, or o.name() when call; NULL (no error set) when that raises. */
static PyObject *attr(PyObject *o, PyObject *name, int call) {
    PyObject *v = call ? PyObject_CallMethodNoArgs(o, name) : PyObject_GetAttr(o, name);
    if (v == NULL)
        PyErr_Clear();
    return v;
}

/* 1 when attr(o, name, call) is want itself (Py_True, torch.strided). */
static int is(PyObject *o, PyObject *name, int call, PyObject *want) {
    PyObject *v = attr(o, name, call);
    if (v == NULL)
        return 0;
    Py_DECREF(v); /* only its identity is compared; want is kept alive elsewhere */
    return v == want;
}

/* Without a tensor reader: the tensor's dtype code, shape and address
 * from its Python attributes. 1 for a contiguous strided CPU tensor of a
 * supported dtype, else 0 (no error set). */
static int tensor_attrs(PyObject *tensor, int64_t *dims, Py_ssize_t *ndim_out, long long *code, void **ptr_out) {
    PyObject *dt = attr(tensor, s_dtype, 0);
    if (dt == NULL)
        return 0;
    PyObject *code_o = PyDict_GetItemWithError(dtypes, dt); /* borrowed */
    Py_DECREF(dt);
    if (code_o == NULL || !bounded(code_o, 0, 1 << 30, code)) {
        PyErr_Clear();
        return 0;
    }
    if (!is(tensor, s_is_cpu, 0, Py_True) || !is(tensor, s_layout, 0, strided) ||
        !is(tensor, s_is_contiguous, 1, Py_True))
        return 0;
    PyObject *shape = attr(tensor, s_shape, 0);
    if (shape == NULL)
        return 0;
    Py_ssize_t ndim = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    if (ndim < 0 || ndim > MAX_DIMS) {
        Py_DECREF(shape);
        return 0;
    }
    for (Py_ssize_t i = 0; i < ndim; i++) {
        long long d;
        if (!bounded(PyTuple_GET_ITEM(shape, i), 0, INT64_MAX, &d)) {
            Py_DECREF(shape);
            return 0;
        }
        dims[i] = d;
    }
    Py_DECREF(shape);
    PyObject *ptr_o = attr(tensor, s_data_ptr, 1);
    if (ptr_o == NULL)
        return 0;
    void *ptr = PyLong_AsVoidPtr(ptr_o);
    Py_DECREF(ptr_o);
    if (ptr == NULL && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *ndim_out = ndim;
    *ptr_out = ptr;
    return 1;
}

static PyObject *allreduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10 && nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "_fastpath.allreduce takes 10 or 11 arguments");
        return NULL;
    }
    PyObject *tensor = args[0], *name = args[4], *op_o = args[5], *pset = args[8];
    PyObject *out = nargs == 11 ? args[10] : Py_None;
    int in_place = PyObject_IsTrue(args[1]), sync = PyObject_IsTrue(args[2]);
    if (handle_map == NULL || forked || sync < 0 || args[3] != Py_None)
        Py_RETURN_NONE;
    /* In place (async or sync), or into out (sync only: an async op's entry
     * keeps and returns its tensor). */
    if (out == Py_None ? in_place != 1 : (in_place != 0 || sync != 1 || Py_TYPE(out) != (PyTypeObject *)tensor_type))
        Py_RETURN_NONE;
    if ((Py_TYPE(tensor) != (PyTypeObject *)tensor_type && Py_TYPE(tensor) != (PyTypeObject *)param_type) ||
        Py_TYPE(pset) != (PyTypeObject *)pset_type)
        Py_RETURN_NONE;
    double pre, post;
    long long prio, op, set;
    if (!real(args[6], &pre) || !real(args[7], &post) || !bounded(args[9], -(1LL << 31), (1LL << 31) - 1, &prio))
        Py_RETURN_NONE;
    if (op_o == Py_None) {
        op = average_op;
    } else {
        int in = PySequence_Contains(fast_ops, op_o);
        if (in != 1 || !bounded(op_o, -(1LL << 31), (1LL << 31) - 1, &op)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    const char *name_c = "";
    if (name != Py_None) {
        if (!PyUnicode_CheckExact(name))
            Py_RETURN_NONE;
        name_c = PyUnicode_AsUTF8(name);
        if (name_c == NULL) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    /* The process set's id. */
    PyObject *pid = attr(pset, s_set_id, 0);
    if (pid == NULL)
        Py_RETURN_NONE;
    int ok = bounded(pid, -(1LL << 31), (1LL << 31) - 1, &set);
    Py_DECREF(pid);
    if (!ok)
        Py_RETURN_NONE;
    /* The tensor: dtype, device, layout, contiguity, address, shape. */
    int64_t dims[MAX_DIMS];
    Py_ssize_t ndim;
    long long code;
    void *ptr;
    if (f_info != NULL) {
        int st, nd;
        if (!f_info(tensor, &st, dims, MAX_DIMS, &nd, &ptr) || st < 0 || st >= MAX_SCALAR_TYPES ||
            info_codes[st] < 0)
            Py_RETURN_NONE;
        ndim = nd;
        code = info_codes[st];
    } else if (tensor_attrs(tensor, dims, &ndim, &code, &ptr) != 1) {
        Py_RETURN_NONE;
    }
    void *dst = ptr;
    if (out != Py_None && f_info != NULL) {
        /* empty_like of a contiguous CPU tensor: the same dtype, shape and
         * layout; its address is all that is needed. */
        int st, nd;
        int64_t odims[MAX_DIMS];
        if (!f_info(out, &st, odims, MAX_DIMS, &nd, &dst))
            Py_RETURN_NONE;
    } else if (out != Py_None) {
        PyObject *dst_o = attr(out, s_data_ptr, 1);
        if (dst_o == NULL)
            Py_RETURN_NONE;
        dst = PyLong_AsVoidPtr(dst_o);
        Py_DECREF(dst_o);
        if (dst == NULL && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    /* The call, without the GIL (as ctypes makes it). */
    int64_t r;
    Py_BEGIN_ALLOW_THREADS
    if (sync)
        r = f_sync(ptr, dst, (int32_t)code, dims, (int64_t)ndim, (int32_t)op, pre, post, (int32_t)set,
                   (char *)name_c, (int32_t)prio, errbuf, ERR_LEN);
    else
        r = f_async(ptr, ptr, (int32_t)code, dims, (int64_t)ndim, (int32_t)op, pre, post, (int32_t)set,
                    (char *)name_c, (int32_t)prio, errbuf, ERR_LEN);
    Py_END_ALLOW_THREADS
    if (r < 0) {
        PyObject *msg = PyUnicode_DecodeUTF8(errbuf, strnlen(errbuf, ERR_LEN), "replace");
        if (msg == NULL)
            return NULL;
        return Py_BuildValue("(LN)", (long long)-r, msg);
    }
    if (sync) {
        PyObject *res = out == Py_None ? tensor : out;
        Py_INCREF(res);
        return res;
    }
    PyObject *h = PyLong_FromLongLong(r);
    if (h == NULL)
        return NULL;
    PyObject *entry = PyTuple_Pack(2, tensor, Py_None); /* synchronize returns the tensor */
    if (entry == NULL || PyDict_SetItem(handle_map, h, entry) < 0 || pending_add(r) < 0) {
        Py_XDECREF(entry);
        Py_DECREF(h);
        return NULL;
    }
    Py_DECREF(entry);
    return h;
}

/* The result of a completed op's entry (keep, result): keep itself when
 * result is None, else result(); NULL with an error set when that raises. */
static PyObject *entry_result(PyObject *entry) {
    PyObject *keep = PyTuple_GET_ITEM(entry, 0), *result = PyTuple_GET_ITEM(entry, 1);
    if (result == Py_None) {
        Py_INCREF(keep);
        return keep;
    }
    return PyObject_CallNoArgs(result);
}

/* Waits for h with hvd_wait_reap, every pending handle a candidate; on
 * success h is released and the other reaped handles go into reaped_set.
 * Returns the library's result (< 0: the op failed, nothing released). */
static int64_t wait_reap(int64_t h) {
    /* A copy: other threads may change pending while the GIL is released. */
    Py_ssize_t n = npending;
    int64_t *buf = PyMem_RawMalloc((size_t)(2 * n + 1) * sizeof(int64_t));
    if (buf == NULL)
        return -1; /* the general path waits and releases */
    memcpy(buf, pending, (size_t)n * sizeof(int64_t));
    int64_t *reaped = buf + n, r;
    Py_BEGIN_ALLOW_THREADS
    r = f_reap(h, buf, (int64_t)n, reaped, (int64_t)n + 1, errbuf, ERR_LEN);
    Py_END_ALLOW_THREADS
    /* Out of pending: h, and the others (a subsequence of the copy, in its
     * order; pending only grows at its end or keeps its order meanwhile). */
    Py_ssize_t j = 0, k = r > 0 && reaped[0] == h ? 1 : 0, m = 0;
    for (Py_ssize_t i = 0; i < npending; i++) {
        if (pending[i] == h)
            continue;
        if (k + j < r && pending[i] == reaped[k + j]) {
            j++;
            continue;
        }
        pending[m++] = pending[i];
    }
    npending = m;
    for (int64_t i = 0; i < r; i++) {
        if (reaped[i] == h)
            continue;
        PyObject *id = PyLong_FromLongLong(reaped[i]);
        /* Only handles still in the table: one popped meanwhile by the
         * Python path is that path's to finish (its release then finds it
         * gone, which it ignores). */
        if (id == NULL || PyDict_Contains(handle_map, id) != 1 || PySet_Add(reaped_set, id) < 0)
            PyErr_Clear(); /* at worst its synchronize waits in the library */
        Py_XDECREF(id);
    }
    PyMem_RawFree(buf);
    return r;
}

static PyObject *synchronize(PyObject *self, PyObject *handle) {
    if (handle_map == NULL || forked)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *entry = PyDict_GetItemWithError(handle_map, handle); /* borrowed */
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    long long h;
    if (!bounded(handle, INT64_MIN + 1, INT64_MAX, &h) || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2)
        Py_RETURN_NOTIMPLEMENTED;
    Py_INCREF(entry);
    int done = PySet_Discard(reaped_set, handle);
    if (done < 0) {
        Py_DECREF(entry);
        return NULL;
    }
    int64_t r = 0;
    int released = done;
    if (!done && PyTuple_GET_ITEM(entry, 1) == Py_None) {
        /* An in-place op: nothing more is needed from the library. */
        r = wait_reap((int64_t)h);
        released = r >= 0;
    } else if (!done) {
        Py_BEGIN_ALLOW_THREADS
        r = f_wait((int64_t)h, errbuf, ERR_LEN);
        Py_END_ALLOW_THREADS
    }
    if (r < 0) {
        Py_DECREF(entry);
        Py_RETURN_NOTIMPLEMENTED; /* the general path raises the op's error */
    }
    PyObject *value = entry_result(entry);
    Py_DECREF(entry);
    /* finally: out of the table, released in the library (an unknown handle
     * is no error: hvd was shut down meanwhile) */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyDict_DelItem(handle_map, handle) < 0)
        PyErr_Clear();
    if (!released) {
        Py_BEGIN_ALLOW_THREADS
        f_release((int64_t)h, errbuf, ERR_LEN);
        Py_END_ALLOW_THREADS
    }
    if (et != NULL) {
        PyErr_Restore(et, ev, tb);
        Py_XDECREF(value);
        return NULL;
    }
    return value;
}

/* ---------------------------------------------------------------- entry */

enum { K_ALLREDUCE_ASYNC_, K_ALLREDUCE_, K_SYNCHRONIZE };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict; /* __name__, __doc__, __wrapped__, ... */
    PyObject *weaklist;
    PyObject *fallback, *default_pset, *raise_refused;
    int kind;
} Entry;

/* Horovod's parameter names, in order (interned at module init). */
#define NPARAMS 8
static const char *param_strs[NPARAMS] = {"tensor", "average", "name", "op", "prescale_factor",
                                          "postscale_factor", "process_set", "priority"};
static PyObject *param_names[NPARAMS], *one_f, *zero_i;

/* The parameter index of keyword k, or -1. */
static int param_index(PyObject *k) {
    for (int i = 0; i < NPARAMS; i++)
        if (k == param_names[i])
            return i;
    for (int i = 0; i < NPARAMS; i++) {
        int eq = PyUnicode_Check(k) ? PyUnicode_Compare(k, param_names[i]) : -1;
        if (eq == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (eq == 0)
            return i;
    }
    return -1;
}

static PyObject *entry_fallback(Entry *e, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(e->fallback, args, nargsf, kwnames);
}

static PyObject *entry_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Entry *e = (Entry *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (e->fallback == NULL) { /* cleared by the collector (entry_clear clears every field) */
        PyErr_SetString(PyExc_TypeError, "_fastpath.entry: called after it was cleared");
        return NULL;
    }
    if (e->kind == K_SYNCHRONIZE) {
        if (nargs == 1 && kwnames == NULL) {
            PyObject *r = synchronize(NULL, args[0]);
            if (r != Py_NotImplemented)
                return r;
            Py_DECREF(r);
        }
        return entry_fallback(e, args, nargsf, kwnames);
    }
    /* tensor, in_place, sync, average, name, op, pre, post, process_set, priority */
    PyObject *v[NPARAMS] = {NULL, Py_None, Py_None, Py_None, one_f, one_f, e->default_pset, zero_i};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 0 || nargs > NPARAMS)
        return entry_fallback(e, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    unsigned seen = 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        int j = param_index(PyTuple_GET_ITEM(kwnames, i));
        if (j < 0 || j < nargs || (seen & (1u << j)))
            return entry_fallback(e, args, nargsf, kwnames); /* it raises TypeError */
        seen |= 1u << j;
        v[j] = args[nargs + i];
    }
    if (v[0] == NULL)
        return entry_fallback(e, args, nargsf, kwnames);
    PyObject *a[10] = {v[0], Py_True, e->kind == K_ALLREDUCE_ ? Py_True : Py_False, v[1], v[2], v[3], v[4], v[5],
                       v[6], v[7]};
    PyObject *r = allreduce(NULL, a, 10);
    if (r == NULL)
        return NULL;
    if (r == Py_None) {
        Py_DECREF(r);
        return entry_fallback(e, args, nargsf, kwnames);
    }
    if (PyTuple_Check(r)) { /* (code, message): the library refused the op */
        PyObject *x = PyObject_CallOneArg(e->raise_refused, r);
        Py_DECREF(r);
        Py_XDECREF(x);
        if (x != NULL)
            PyErr_SetString(PyExc_RuntimeError, "_fastpath: raise_refused returned");
        return NULL;
    }
    return r;
}

static int entry_traverse(PyObject *self, visitproc visit, void *arg) {
    Entry *e = (Entry *)self;
    Py_VISIT(e->dict);
    Py_VISIT(e->fallback);
    Py_VISIT(e->default_pset);
    Py_VISIT(e->raise_refused);
    return 0;
}

static int entry_clear(PyObject *self) {
    Entry *e = (Entry *)self;
    Py_CLEAR(e->dict);
    Py_CLEAR(e->fallback);
    Py_CLEAR(e->default_pset);
    Py_CLEAR(e->raise_refused);
    return 0;
}

static void entry_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    if (((Entry *)self)->weaklist != NULL)
        PyObject_ClearWeakRefs(self);
    entry_clear(self);
    PyObject_GC_Del(self);
}

/* As a function: a class attribute binds to the instance it is read from
 * (a method whose first argument is the instance). */
static PyObject *entry_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* Pickled by reference (its __name__ in its __module__), as a function. */
static PyObject *entry_reduce(PyObject *self, PyObject *unused) {
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyObject *entry_repr(PyObject *self) {
    PyObject *name = PyObject_GetAttrString(self, "__qualname__");
    if (name == NULL) {
        PyErr_Clear();
        return PyUnicode_FromFormat("<hvd entry at %p>", self);
    }
    PyObject *r = PyUnicode_FromFormat("<function %S (C fast path) at %p>", name, self);
    Py_DECREF(name);
    return r;
}

static PyMethodDef entry_methods[] = {
    {"__reduce__", entry_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef entry_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hvd.common._fastpath.entry",
    .tp_basicsize = sizeof(Entry),
    .tp_dealloc = entry_dealloc,
    .tp_vectorcall_offset = offsetof(Entry, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = entry_repr,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_descr_get = entry_get,
    .tp_weaklistoffset = offsetof(Entry, weaklist),
    .tp_traverse = entry_traverse,
    .tp_clear = entry_clear,
    .tp_methods = entry_methods,
    .tp_getset = entry_getset,
    .tp_dictoffset = offsetof(Entry, dict),
};

static PyObject *entry(PyObject *self, PyObject *args) {
    const char *kind;
    PyObject *fallback, *pset, *refused;
    if (!PyArg_ParseTuple(args, "sOOO", &kind, &fallback, &pset, &refused))
        return NULL;
    int k = strcmp(kind, "allreduce_async_") == 0 ? K_ALLREDUCE_ASYNC_
            : strcmp(kind, "allreduce_") == 0    ? K_ALLREDUCE_
            : strcmp(kind, "synchronize") == 0   ? K_SYNCHRONIZE
                                                 : -1;
    if (k < 0) {
        PyErr_Format(PyExc_ValueError, "_fastpath.entry: unknown kind %s", kind);
        return NULL;
    }
    if (!PyCallable_Check(fallback) || !PyCallable_Check(refused)) {
        PyErr_SetString(PyExc_TypeError, "_fastpath.entry: fallback and raise_refused must be callable");
        return NULL;
    }
    Entry *e = PyObject_GC_New(Entry, &EntryType);
    if (e == NULL)
        return NULL;
    e->vectorcall = entry_call;
    e->dict = NULL;
    e->weaklist = NULL;
    e->kind = k;
    Py_INCREF(fallback);
    e->fallback = fallback;
    Py_INCREF(pset);
    e->default_pset = pset;
    Py_INCREF(refused);
    e->raise_refused = refused;
    PyObject_GC_Track(e);
    return (PyObject *)e;
}

static PyObject *has_reader(PyObject *self, PyObject *unused) { return PyBool_FromLong(f_info != NULL); }

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(addresses..., handle_map, reaped, Tensor, Parameter, ProcessSet, dtypes, strided, ops, average)"},
    {"allreduce", (PyCFunction)(void (*)(void))allreduce, METH_FASTCALL, "the in-place allreduce of a plain tensor, or its synchronous allreduce into out"},
    {"synchronize", synchronize, METH_O, "synchronize(handle) of a handle whose op succeeded"},
    {"has_reader", has_reader, METH_NOARGS, "whether setup was given a tensor reader"},
    {"entry", entry, METH_VARARGS, "entry(kind, fallback, default_process_set, raise_refused): allreduce_async_, allreduce_ or synchronize in C"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    PyObject **names[] = {&s_dtype, &s_is_cpu, &s_layout, &s_is_contiguous, &s_data_ptr, &s_shape, &s_set_id};
    const char *strs[] = {"dtype", "is_cpu", "layout", "is_contiguous", "data_ptr", "shape", "process_set_id"};
    for (int i = 0; i < 7; i++) {
        *names[i] = PyUnicode_InternFromString(strs[i]);
        if (*names[i] == NULL)
            return NULL;
    }
    for (int i = 0; i < NPARAMS; i++) {
        param_names[i] = PyUnicode_InternFromString(param_strs[i]);
        if (param_names[i] == NULL)
            return NULL;
    }
    one_f = PyFloat_FromDouble(1.0);
    zero_i = PyLong_FromLong(0);
    if (one_f == NULL || zero_i == NULL || PyType_Ready(&EntryType) < 0)
        return NULL;
    return PyModule_Create(&module);
}
