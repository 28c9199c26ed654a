package gobind

import (
	"go/types"
	"io"
	"strings"

	"github.com/dave/jennifer/jen"
)

// helperNames are the package-level functions every generated file declares.
var helperNames = []string{"hvdSet", "hvdErr", "hvdAllreduce", "hvdBroadcast", "hvdAllgather"}

// renderFile writes the generated file of one package.
func renderFile(w io.Writer, pkgPath, pkgName string, pkg *types.Package, tts []*tensorType) error {
	f := jen.NewFilePathName(pkgPath, pkgName)
	f.HeaderComment(Header)
	f.ImportName(SDKPath, "sdk")
	for _, tt := range tts {
		for _, fl := range tt.fields {
			if n, ok := fl.elem.(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg() != pkg {
				f.ImportName(n.Obj().Pkg().Path(), n.Obj().Pkg().Name())
			}
		}
	}
	for _, tt := range tts {
		renderType(f, pkg, tt)
	}
	renderHelpers(f)
	return f.Render(w)
}

func sdkID(name string) *jen.Statement { return jen.Qual(SDKPath, name) }

// elemCode is the Go type of a tensor element as the generated file names it.
func elemCode(pkg *types.Package, t types.Type) jen.Code {
	if n, ok := t.(*types.Named); ok {
		if n.Obj().Pkg() == nil || n.Obj().Pkg() == pkg {
			return jen.Id(n.Obj().Name())
		}
		return jen.Qual(n.Obj().Pkg().Path(), n.Obj().Name())
	}
	return jen.Id(t.(*types.Basic).Name())
}

func renderType(f *jen.File, pkg *types.Package, tt *tensorType) {
	T := tt.name
	gathered := T + "Gathered"
	names := make([]string, len(tt.fields))
	fieldList := make([]string, len(tt.fields))
	for i, fl := range tt.fields {
		names[i] = tt.prefix + "." + fl.tensor
		fieldList[i] = fl.name
	}

	f.Commentf("%s holds what %s.AllgatherAll returns: each tensor field of every", gathered, T)
	f.Comment("member of the process set, concatenated in set-rank order.")
	f.Type().Id(gathered).StructFunc(func(g *jen.Group) {
		for _, fl := range tt.fields {
			g.Id(fl.name).Index().Add(elemCode(pkg, fl.elem))
		}
	})
	f.Line()

	f.Comment("HvdTensors returns the tensor fields of m (" + strings.Join(fieldList, ", ") + ") as")
	f.Comment("sdk tensors that share their memory, and the names they are known by, in")
	f.Comment("field order.")
	f.Func().Params(jen.Id("m").Op("*").Id(T)).Id("HvdTensors").Params().Params(jen.Index().String(), jen.Index().Add(sdkID("Tensor"))).Block(
		jen.Return(
			jen.Index().String().ValuesFunc(func(g *jen.Group) {
				for _, n := range names {
					g.Lit(n)
				}
			}),
			jen.Index().Add(sdkID("Tensor")).ValuesFunc(func(g *jen.Group) {
				for _, fl := range tt.fields {
					field := jen.Id("m").Dot(fl.name)
					if fl.array {
						field = field.Index(jen.Empty(), jen.Empty())
					}
					g.Line().Add(sdkID("TensorOf")).Types(elemCode(pkg, fl.elem)).Call(field)
				}
				g.Line()
			}),
		),
	)
	f.Line()

	f.Commentf("AllreduceAll reduces every tensor field of m over ps (nil: the process-wide")
	f.Comment("global set) in place, as one grouped allreduce named o.Name (default " + quote(tt.prefix) + "):")
	f.Comment("the fields are negotiated together and fused when they fit. Every member")
	f.Comment("must call it with fields of the same lengths; m must not be used until it")
	f.Comment("returns. Errors name the fields in order.")
	f.Func().Params(jen.Id("m").Op("*").Id(T)).Id("AllreduceAll").Params(
		jen.Id("ps").Op("*").Add(sdkID("ProcessSet")), jen.Id("o").Add(sdkID("ReduceOptions")),
	).Error().Block(
		jen.List(jen.Id("names"), jen.Id("ts")).Op(":=").Id("m").Dot("HvdTensors").Call(),
		jen.Return(jen.Id("hvdAllreduce").Call(jen.Id("ps"), jen.Id("o"), jen.Lit(tt.prefix), jen.Id("names"), jen.Id("ts"))),
	)
	f.Line()

	f.Comment("BroadcastAll overwrites every tensor field of m with root's (root is a global")
	f.Comment("rank, a member of ps; nil ps: the global set). Each field is broadcast under")
	f.Comment("its name (" + names[0] + ", …), all enqueued before any is awaited.")
	f.Func().Params(jen.Id("m").Op("*").Id(T)).Id("BroadcastAll").Params(
		jen.Id("ps").Op("*").Add(sdkID("ProcessSet")), jen.Id("root").Int(),
	).Error().Block(
		jen.List(jen.Id("names"), jen.Id("ts")).Op(":=").Id("m").Dot("HvdTensors").Call(),
		jen.Return(jen.Id("hvdBroadcast").Call(jen.Id("ps"), jen.Id("root"), jen.Id("names"), jen.Id("ts"))),
	)
	f.Line()

	f.Comment("AllgatherAll concatenates every member's tensor fields in set-rank order")
	f.Comment("(lengths may differ per member), as one grouped allgather named " + quote(tt.prefix) + ";")
	f.Comment("m is not modified.")
	f.Func().Params(jen.Id("m").Op("*").Id(T)).Id("AllgatherAll").Params(
		jen.Id("ps").Op("*").Add(sdkID("ProcessSet")),
	).Params(jen.Op("*").Id(gathered), jen.Error()).Block(
		jen.List(jen.Id("names"), jen.Id("ts")).Op(":=").Id("m").Dot("HvdTensors").Call(),
		jen.List(jen.Id("outs"), jen.Err()).Op(":=").Id("hvdAllgather").Call(jen.Id("ps"), jen.Lit(tt.prefix), jen.Id("names"), jen.Id("ts")),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Return(jen.Op("&").Id(gathered).ValuesFunc(func(g *jen.Group) {
			for i, fl := range tt.fields {
				g.Line().Id(fl.name).Op(":").Add(sdkID("SliceOf")).Types(elemCode(pkg, fl.elem)).Call(jen.Id("outs").Index(jen.Lit(i)))
			}
			g.Line()
		}), jen.Nil()),
	)
	f.Line()
}

// renderHelpers writes the functions the methods share (once per file).
func renderHelpers(f *jen.File) {
	ps := func() *jen.Statement { return jen.Id("ps").Op("*").Add(sdkID("ProcessSet")) }
	setOrReturn := func(results ...jen.Code) jen.Code {
		return jen.Null().Add(
			jen.List(jen.Id("ps"), jen.Err()).Op(":=").Id("hvdSet").Call(jen.Id("ps")),
		).Line().If(jen.Err().Op("!=").Nil()).Block(jen.Return(results...))
	}

	f.Comment("hvdSet returns ps, or the process-wide global set when ps is nil.")
	f.Func().Id("hvdSet").Params(ps()).Params(jen.Op("*").Add(sdkID("ProcessSet")), jen.Error()).Block(
		jen.If(jen.Id("ps").Op("!=").Nil()).Block(jen.Return(jen.Id("ps"), jen.Nil())),
		jen.Return(sdkID("GlobalProcessSet").Call()),
	)
	f.Line()

	f.Comment("hvdErr names the tensors of a grouped op in its error.")
	f.Func().Id("hvdErr").Params(jen.Err().Error(), jen.Id("group").String(), jen.Id("names").Index().String()).Error().Block(
		jen.If(jen.Err().Op("==").Nil()).Block(jen.Return(jen.Nil())),
		jen.Return(jen.Qual("fmt", "Errorf").Call(jen.Lit("%s (tensors %s, in order): %w"), jen.Id("group"),
			jen.Qual("strings", "Join").Call(jen.Id("names"), jen.Lit(", ")), jen.Err())),
	)
	f.Line()

	f.Comment("hvdAllreduce reduces ts in place as one group. With compression the SDK")
	f.Comment("reduces into new tensors, copied back.")
	f.Func().Id("hvdAllreduce").Params(ps(), jen.Id("o").Add(sdkID("ReduceOptions")), jen.Id("group").String(),
		jen.Id("names").Index().String(), jen.Id("ts").Index().Add(sdkID("Tensor"))).Error().Block(
		setOrReturn(jen.Err()),
		jen.If(jen.Id("o").Dot("Name").Op("==").Lit("")).Block(jen.Id("o").Dot("Name").Op("=").Id("group")),
		jen.If(jen.Id("o").Dot("Compression").Op("==").Add(sdkID("CompressionNone"))).Block(
			jen.List(jen.Id("h"), jen.Err()).Op(":=").Id("ps").Dot("GroupedAllreduceIntoAsync").Call(jen.Id("ts"), jen.Id("ts"), jen.Id("o")),
			jen.If(jen.Err().Op("==").Nil()).Block(
				jen.List(jen.Id("_"), jen.Err()).Op("=").Id("h").Dot("Wait").Call(),
			),
			jen.Return(jen.Id("hvdErr").Call(jen.Err(), jen.Id("o").Dot("Name"), jen.Id("names"))),
		),
		jen.List(jen.Id("outs"), jen.Err()).Op(":=").Id("ps").Dot("GroupedAllreduce").Call(jen.Id("ts"), jen.Id("o")),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Id("hvdErr").Call(jen.Err(), jen.Id("o").Dot("Name"), jen.Id("names")))),
		jen.For(jen.List(jen.Id("i"), jen.Id("out")).Op(":=").Range().Id("outs")).Block(
			jen.Copy(jen.Id("ts").Index(jen.Id("i")).Dot("Data"), jen.Id("out").Dot("Data")),
		),
		jen.Return(jen.Nil()),
	)
	f.Line()

	f.Comment("hvdBroadcast broadcasts each tensor under its name: all are enqueued, then")
	f.Comment("all awaited (also after an enqueue error: their memory is in use until then).")
	f.Func().Id("hvdBroadcast").Params(ps(), jen.Id("root").Int(), jen.Id("names").Index().String(),
		jen.Id("ts").Index().Add(sdkID("Tensor"))).Error().Block(
		setOrReturn(jen.Err()),
		jen.Id("hs").Op(":=").Make(jen.Index().Op("*").Add(sdkID("Handle")), jen.Lit(0), jen.Len(jen.Id("ts"))),
		jen.For(jen.List(jen.Id("i"), jen.Id("t")).Op(":=").Range().Id("ts")).Block(
			jen.List(jen.Id("h"), jen.Id("e")).Op(":=").Id("ps").Dot("BroadcastAsync").Call(jen.Id("t"), jen.Id("root"), jen.Id("names").Index(jen.Id("i"))),
			jen.If(jen.Id("e").Op("!=").Nil()).Block(
				jen.Err().Op("=").Qual("fmt", "Errorf").Call(jen.Lit("%s: %w"), jen.Id("names").Index(jen.Id("i")), jen.Id("e")),
				jen.Break(),
			),
			jen.Id("hs").Op("=").Append(jen.Id("hs"), jen.Id("h")),
		),
		jen.For(jen.List(jen.Id("i"), jen.Id("h")).Op(":=").Range().Id("hs")).Block(
			jen.If(jen.List(jen.Id("_"), jen.Id("e")).Op(":=").Id("h").Dot("Wait").Call(), jen.Id("e").Op("!=").Nil().Op("&&").Err().Op("==").Nil()).Block(
				jen.Err().Op("=").Qual("fmt", "Errorf").Call(jen.Lit("%s: %w"), jen.Id("names").Index(jen.Id("i")), jen.Id("e")),
			),
		),
		jen.Return(jen.Err()),
	)
	f.Line()

	f.Comment("hvdAllgather gathers ts as one group and returns the outputs in order.")
	f.Func().Id("hvdAllgather").Params(ps(), jen.Id("group").String(), jen.Id("names").Index().String(),
		jen.Id("ts").Index().Add(sdkID("Tensor"))).Params(jen.Index().Add(sdkID("Tensor")), jen.Error()).Block(
		setOrReturn(jen.Nil(), jen.Err()),
		jen.List(jen.Id("h"), jen.Err()).Op(":=").Id("ps").Dot("GroupedAllgatherAsync").Call(jen.Id("ts"), jen.Id("group")),
		jen.If(jen.Err().Op("==").Nil()).Block(
			jen.List(jen.Id("_"), jen.Err()).Op("=").Id("h").Dot("Wait").Call(),
		),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Id("hvdErr").Call(jen.Err(), jen.Id("group"), jen.Id("names")))),
		jen.Return(jen.Id("h").Dot("Outputs").Call(), jen.Nil()),
	)
}
