// The kernel generator is its own module so that avo (and its
// dependencies) never enter github.com/hvdorg/hvd's module graph: building,
// vetting or testing hvd needs only the generated files it commits.
module github.com/hvdorg/hvd/backends/internal/asmgen

go 1.26.0

require github.com/mmcloughlin/avo v0.5.0

require (
	golang.org/x/mod v0.6.0 // indirect
	golang.org/x/sys v0.1.0 // indirect
	golang.org/x/tools v0.2.0 // indirect
)
