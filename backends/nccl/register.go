package nccl

import "github.com/hvdorg/hvd/backends"

func init() {
	backends.Register(backends.Backend{
		// After tcp, which serves every set: auto never picks NCCL (whether
		// it loads can differ between hosts, and the choice must be the
		// same on every member); HVD_BACKEND=nccl does, for every set.
		Name: "nccl", Label: "NCCL", Preference: 200, Choosable: true, OwnControl: false,
		// Never a flat sub-communicator (hier's meshes, the host plane a
		// Comm is given): those move host memory.
		Serves: func(s backends.SetInfo) bool { return s.Size >= 1 && !s.Flat },
		Doc:    "NVIDIA NCCL on GPU memory (loaded at run time), negotiation over the set's host transport",
	})
}
