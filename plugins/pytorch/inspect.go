package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/hvdorg/hvd/codegen/split"
	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/splitgen"
)

// inspectScript imports a factory model in the user's interpreter and
// reports its layers (see the comment at its top for what it accepts and
// measures).
//
//go:embed inspect_model.py
var inspectScript string

// Inspection parameters: the sample batch every layer runs on, and how
// many timed forward+backward passes the cost is the median of.
const (
	inspectBatch   = 8
	inspectRepeats = 7
)

// inspectTimeout bounds one inspection (importing torch takes seconds; a
// big model's timing passes take longer).
var inspectTimeout = 5 * time.Minute

const inspectMarker = "HVD-INSPECT "

// inspectAnswer is the script's JSON.
type inspectAnswer struct {
	Model      string `json:"model"`
	InputShape []int  `json:"input_shape"`
	InputFrom  string `json:"input_from"`
	DType      string `json:"dtype"`
	InputDType string `json:"input_dtype"`
	InputHigh  int    `json:"input_high"`
	Batch      int    `json:"batch"`
	CostUnit   string `json:"cost_unit"`
	Torch      string `json:"torch"`
	Layers     []struct {
		Type   string  `json:"type"`
		Name   string  `json:"name"`
		Params int64   `json:"params"`
		In     []int   `json:"in"`
		Out    []int   `json:"out"`
		Cost   float64 `json:"cost"`
	} `json:"layers"`
	Error *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Layer   *int   `json:"layer"`
	} `json:"error"`
}

// errInspect: the interpreter could not be run or gave no answer.
var errInspect = errors.New("pytorch: factory inspection failed")

// inspectFactory runs the factory model of r's spec in r.Python and turns
// what it reports into the generator's model. Problems with the user's
// model are positioned spec errors (splitgen.Invalid) naming the factory
// and the layer; torch missing in the interpreter is ErrNotImportable.
func inspectFactory(ctx context.Context, r *splitgen.Request) (*split.Model, string, error) {
	s := r.Spec
	factory := s.Model.Factory
	dir := r.Dir
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return nil, "", err
		}
	}
	args, err := json.Marshal(map[string]any{
		"dir": dir, "factory": factory, "input_shape": s.Model.InputShape, "input_dtype": nilIfEmpty(s.Model.InputDType),
		"batch": inspectBatch, "repeats": inspectRepeats,
	})
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.Python, "-c", inspectScript, string(args))
	cmd.Dir = dir
	// Importing the user's module must not litter their directory.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	i := strings.LastIndex(stdout.String(), inspectMarker)
	if i < 0 {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		switch {
		case ctx.Err() != nil:
			runErr = fmt.Errorf("no answer within %v", inspectTimeout)
		case runErr == nil:
			runErr = errors.New("no answer on stdout")
		}
		return nil, "", fmt.Errorf("%w: %s with %s: %v %s", errInspect, factory, r.Python, runErr, msg)
	}
	line := stdout.String()[i+len(inspectMarker):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var a inspectAnswer
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		return nil, "", fmt.Errorf("%w: %s with %s: bad answer %q: %v", errInspect, factory, r.Python, line, err)
	}
	if e := a.Error; e != nil {
		switch e.Kind {
		case "torch":
			return nil, "", fmt.Errorf("%w: inspecting model.factory %s needs torch in %s: %s; choose an interpreter with torch (--python)",
				plugin.ErrNotImportable, factory, r.Python, e.Message)
		case "internal":
			return nil, "", fmt.Errorf("%w: %s with %s: %s", errInspect, factory, r.Python, e.Message)
		}
		path := "model.factory"
		switch {
		case e.Kind == "shape" && e.Layer != nil && *e.Layer == 0 && s.Model.InputShape != nil:
			path = "model.input_shape"
		case e.Kind == "input_dtype":
			path = "model.input_dtype"
		}
		return nil, "", splitgen.Invalid(s.ErrorAt(path, "%s: %s", factory, e.Message))
	}
	if len(a.Layers) == 0 {
		return nil, "", fmt.Errorf("%w: %s with %s: no layers in the answer", errInspect, factory, r.Python)
	}
	m := &split.Model{Factory: factory, InShape: a.InputShape, DType: a.DType, InputHigh: a.InputHigh}
	if strings.HasPrefix(a.InputDType, "int") {
		m.InputDType = a.InputDType
	}
	for i, l := range a.Layers {
		m.Layers = append(m.Layers, split.Layer{
			Index: i, Name: l.Name, Type: l.Type, Params: l.Params,
			InShape: l.In, OutShape: l.Out, Cost: l.Cost,
		})
	}
	input := fmt.Sprintf("input %v per sample (from %s)", a.InputShape, a.InputFrom)
	if m.InputDType != "" {
		input = fmt.Sprintf("input %v %s ids below %d per sample (from %s)", a.InputShape, m.InputDType, a.InputHigh, a.InputFrom)
	}
	note := fmt.Sprintf("%s: %d layers (%s) inspected with %s, torch %s; %s; cost = %s, batch %d",
		factory, len(a.Layers), a.Model, r.Python, a.Torch, input, a.CostUnit, a.Batch)
	return m, note, nil
}

// nilIfEmpty: JSON null for "".
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
