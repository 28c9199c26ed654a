// hvd.torch._tensorinfo: what hvd/common/_fastpath.c needs to know of a
// tensor (is it a contiguous strided CPU tensor, its scalar type, shape and
// address), read from the at::Tensor behind the Python object instead of
// through six Python attribute calls (dtype, is_cpu, layout,
// is_contiguous(), shape, data_ptr(): about 0.4 µs per op on the AMD VM,
// 16 ns this way; issue 27).
//
// Built by `make python` against the torch that $(PYTHON) imports, when its
// C++ headers are there; optional. It reads torch's C++ objects, so it is
// only valid for the torch it was compiled against: hvd.torch.tensors uses
// it only when torch's version is the one compiled in (version()) and its
// answers agree with the Python attributes on sample tensors (check()).
//
//   info           a capsule ("hvd.torch._tensorinfo.info") holding
//                  int info(PyObject *t, int *scalar_type, int64_t *dims,
//                           int maxdims, int *ndim, void **data)
//                  1 with the fields set for a contiguous strided CPU tensor
//                  of at most maxdims dimensions; 0 for anything else (not a
//                  tensor, another device or layout, not contiguous, no
//                  storage: whatever raised). Called with the GIL held.
//   describe(t)    None, or (scalar_type, shape tuple, address): info's
//                  answer for t, for the checks.
//   version()      (major, minor, patch) of the torch compiled against.
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>
#include <torch/version.h>

namespace {

int info(PyObject *obj, int *scalar_type, int64_t *dims, int maxdims, int *ndim, void **data) noexcept {
    try {
        if (!THPVariable_Check(obj))
            return 0;
        const at::Tensor &t = THPVariable_Unpack(obj);
        // layout first: is_contiguous() throws for a sparse tensor
        if (!t.defined() || t.layout() != c10::kStrided || !t.device().is_cpu() || !t.is_contiguous())
            return 0;
        c10::IntArrayRef sizes = t.sizes();
        if (sizes.size() > static_cast<size_t>(maxdims))
            return 0;
        for (size_t i = 0; i < sizes.size(); i++)
            dims[i] = sizes[i];
        *ndim = static_cast<int>(sizes.size());
        *scalar_type = static_cast<int>(t.scalar_type());
        *data = t.data_ptr();
        return 1;
    } catch (...) {
        return 0;
    }
}

PyObject *describe(PyObject *, PyObject *obj) {
    int64_t dims[64];
    int st = 0, nd = 0;
    void *data = nullptr;
    if (!info(obj, &st, dims, 64, &nd, &data))
        Py_RETURN_NONE;
    PyObject *shape = PyTuple_New(nd);
    if (shape == nullptr)
        return nullptr;
    for (int i = 0; i < nd; i++) {
        PyObject *d = PyLong_FromLongLong(dims[i]);
        if (d == nullptr) {
            Py_DECREF(shape);
            return nullptr;
        }
        PyTuple_SET_ITEM(shape, i, d);
    }
    return Py_BuildValue("(iNK)", st, shape, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(data)));
}

PyObject *version(PyObject *, PyObject *) {
    return Py_BuildValue("(iii)", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

PyMethodDef methods[] = {
    {"describe", describe, METH_O, "None, or (scalar_type, shape, address) of a contiguous strided CPU tensor"},
    {"version", version, METH_NOARGS, "(major, minor, patch) of the torch compiled against"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tensorinfo", nullptr, -1, methods};

} // namespace

PyMODINIT_FUNC PyInit__tensorinfo(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == nullptr)
        return nullptr;
    PyObject *cap = PyCapsule_New(reinterpret_cast<void *>(&info), "hvd.torch._tensorinfo.info", nullptr);
    if (cap == nullptr || PyModule_AddObject(m, "info", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
