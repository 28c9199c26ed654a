package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/sdk"
)

// writeTimeline runs a one-process job that makes steps×2 named allreduces
// with HOROVOD_TIMELINE set, and returns the timeline's path.
func writeTimeline(t *testing.T, steps int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tl.json")
	env := map[string]string{"HOROVOD_TIMELINE": path}
	w, err := sdk.Start(context.Background(), sdk.Config{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	g := w.GlobalProcessSet()
	for s := 0; s < steps; s++ {
		for i := 0; i < 2; i++ {
			buf := make([]float32, 16)
			if err := g.AllreduceInPlace(sdk.TensorOf(buf), sdk.ReduceOptions{Op: sdk.Sum, Name: fmt.Sprintf("grad.%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTimelineReport(t *testing.T) {
	path := writeTimeline(t, 3)
	out, errOut, code := run(t, "timeline", "report", path)
	html := strings.TrimSuffix(path, ".json") + ".html"
	if code != 0 || !strings.Contains(out, "wrote "+html+": 6 ops of 2 tensors in 3 steps") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"allreduce.grad.0", "allreduce.grad.1", `<table id="steps">`, "<svg"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// --output elsewhere.
	other := filepath.Join(t.TempDir(), "r.html")
	if _, _, code := run(t, "timeline", "report", "-o", other, path); code != 0 {
		t.Fatalf("--output: exit %d", code)
	}
	if _, err := os.Stat(other); err != nil {
		t.Error(err)
	}
}

// Bad input: no file, a file that is not a timeline, a timeline without a
// completed op: exit 2 naming the problem, and no page is left behind.
func TestTimelineReportBadInput(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "x.json")
	os.WriteFile(notJSON, []byte("hello"), 0o600)
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`[{"name":"process_name","ph":"M","pid":0,"args":{"name":"hvd timeline"}}]`), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"timeline", "report"}, "one timeline FILE"},
		{[]string{"timeline", "report", filepath.Join(dir, "missing.json")}, "no such file"},
		{[]string{"timeline", "report", notJSON}, "not a trace-event JSON array"},
		{[]string{"timeline", "report", empty}, "holds no completed op"},
	} {
		_, _, code := run(t, tc.args...)
		err := newApp().Run(append([]string{"hvdgen"}, tc.args...))
		if code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: exit %d, %v; want 2 and %q", tc.args, code, err, tc.want)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.html")); len(m) != 0 {
		t.Errorf("pages left behind: %v", m)
	}
}
