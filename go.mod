module github.com/hvdorg/hvd

go 1.26.0

require (
	github.com/dave/jennifer v1.7.1
	golang.org/x/sys v0.50.0
	golang.org/x/tools v0.52.0
)
