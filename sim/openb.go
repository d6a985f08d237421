package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// This file reads the node and pod lists of the Alibaba GPU trace v2023
// ("openb", from the ATC'23 FGD paper). The formats are described in
// shared/traces/alibaba-gpu-v2023/SOURCE.md. Columns are looked up by header
// name so that hand-written or re-exported files with a different column
// order still load, and every error names the file and line so a bad row in a
// 10k-row file can be found without a debugger.

// TraceNode is one row of an openb node list.
type TraceNode struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	GPUs      int
	Model     string // empty for CPU-only nodes
	Line      int    // 1-based line in the source file, for error messages downstream
}

// TracePod is one row of an openb pod list.
type TracePod struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	NumGPU    int
	GPUMilli  int      // per GPU, in thousandths of a GPU
	GPUSpec   []string // allowed models, split on '|'; nil = any
	// RepeatedSpec is set only when gpu_spec names a model twice (the
	// trace has "V100M16|V100M32|V100M32"): its models as written, repeats
	// kept. The FGD paper's simulator groups pods into task types by the
	// gpu_spec string, so such a pod is a type apart.
	RepeatedSpec string
	QoS          string
	Phase        string
	HasTimes     bool // false for files without the time columns
	Creation     int64
	Deletion     int64 // -1 when empty
	Scheduled    int64 // -1 when empty (Pending pods)
	Line         int   // 1-based line in the source file
}

const (
	// maxPodGPUs bounds num_gpu. The trace never exceeds 8, but synthetic
	// workloads may model bigger gang jobs; the bound only exists to catch
	// garbage such as a timestamp pasted into the wrong column.
	maxPodGPUs = 64
	// maxNodeGPUs is a sanity bound for the same reason: the engine sizes
	// per-GPU slices from this number.
	maxNodeGPUs = 1024
	// fullGPUMilli is one whole GPU in gpu_milli units.
	fullGPUMilli = 1000
)

var nodeColumns = []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}

var podColumns = []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}

// podTimeColumns are optional as a group: the multigpu* files have none of
// them, and a file with only some of them is most likely truncated.
var podTimeColumns = []string{"creation_time", "deletion_time", "scheduled_time"}

// ReadNodes reads an openb node list from path. Errors are prefixed with path
// exactly as given.
func ReadNodes(path string) ([]TraceNode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading node list: %w", err)
	}
	defer f.Close()
	return ParseNodes(f, path)
}

// ReadPods reads an openb pod list from path. Errors are prefixed with path
// exactly as given.
func ReadPods(path string) ([]TracePod, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading pod list: %w", err)
	}
	defer f.Close()
	return ParsePods(f, path)
}

// ParseNodes parses an openb node list. source names the input in error
// messages ("source:line: ...").
func ParseNodes(r io.Reader, source string) ([]TraceNode, error) {
	t, err := newTable(r, source)
	if err != nil {
		return nil, err
	}
	if err := t.require(nodeColumns...); err != nil {
		return nil, err
	}
	cSN, cCPU, cMem, cGPU, cModel := t.col["sn"], t.col["cpu_milli"], t.col["memory_mib"], t.col["gpu"], t.col["model"]

	var nodes chunked[TraceNode]
	seen := make(map[string]int)
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		n := TraceNode{Line: t.line}
		if n.Name, err = t.name(cSN); err != nil {
			return nil, err
		}
		if first, dup := seen[n.Name]; dup {
			return nil, t.errf(cSN, "duplicate node name %q (first on line %d)", n.Name, first)
		}
		seen[n.Name] = n.Line
		if n.CPUMilli, err = t.int(cCPU, 0, -1); err != nil {
			return nil, err
		}
		if n.MemoryMiB, err = t.int(cMem, 0, -1); err != nil {
			return nil, err
		}
		gpus, err := t.int(cGPU, 0, maxNodeGPUs)
		if err != nil {
			return nil, err
		}
		n.GPUs = int(gpus)
		n.Model = t.optional(cModel)
		if n.GPUs > 0 && n.Model == "" {
			return nil, t.errf(cModel, "node %q has %d GPUs but no model", n.Name, n.GPUs)
		}
		nodes.add(n)
	}
	if nodes.n == 0 {
		return nil, t.noRows()
	}
	return nodes.slice(), nil
}

// ParsePods parses an openb pod list, with or without the time columns.
// source names the input in error messages ("source:line: ...").
func ParsePods(r io.Reader, source string) ([]TracePod, error) {
	pr, err := newPodReader(r, source)
	if err != nil {
		return nil, err
	}
	var pods chunked[TracePod]
	for {
		ok, err := pr.t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		p, err := pr.pod()
		if err != nil {
			return nil, err
		}
		pods.add(p)
	}
	if pods.n == 0 {
		return nil, pr.t.noRows()
	}
	return pods.slice(), nil
}

// podReader reads the rows of a pod list: it knows the column of each
// field (-1 for an absent optional one) and remembers the names seen.
type podReader struct {
	t        *table
	hasTimes bool

	cName, cCPU, cMem, cNum, cMilli int
	cSpec, cQoS, cPhase             int
	cCreate, cDelete, cSched        int

	seen map[string]int // pod name -> line
	// specs interns gpu_spec lists: the gpuspec* files repeat a dozen
	// distinct values thousands of times, so sharing the slices saves both
	// the split and the memory. Callers must treat GPUSpec as read-only.
	specs map[string][]string
}

// newPodReader reads the header and checks that the required columns are
// there, and that the time columns are all there or all absent.
func newPodReader(r io.Reader, source string) (*podReader, error) {
	t, err := newTable(r, source)
	if err != nil {
		return nil, err
	}
	if err := t.require(podColumns...); err != nil {
		return nil, err
	}
	pr := &podReader{t: t, seen: make(map[string]int), specs: make(map[string][]string)}
	for _, c := range podTimeColumns {
		if _, ok := t.col[c]; ok {
			pr.hasTimes = true
		}
	}
	if pr.hasTimes {
		if err := t.require(podTimeColumns...); err != nil {
			return nil, err
		}
	}
	get := func(name string) int {
		if c, ok := t.col[name]; ok {
			return c
		}
		return -1
	}
	pr.cName, pr.cCPU, pr.cMem, pr.cNum, pr.cMilli = get("name"), get("cpu_milli"), get("memory_mib"), get("num_gpu"), get("gpu_milli")
	pr.cSpec, pr.cQoS, pr.cPhase = get("gpu_spec"), get("qos"), get("pod_phase")
	pr.cCreate, pr.cDelete, pr.cSched = get("creation_time"), get("deletion_time"), get("scheduled_time")
	return pr, nil
}

// pod parses the current row.
func (pr *podReader) pod() (TracePod, error) {
	t := pr.t
	p := TracePod{Line: t.line, HasTimes: pr.hasTimes, Deletion: -1, Scheduled: -1}
	var err error
	if p.Name, err = t.name(pr.cName); err != nil {
		return p, err
	}
	if first, dup := pr.seen[p.Name]; dup {
		return p, t.errf(pr.cName, "duplicate pod name %q (first on line %d)", p.Name, first)
	}
	pr.seen[p.Name] = p.Line
	if p.CPUMilli, err = t.int(pr.cCPU, 0, -1); err != nil {
		return p, err
	}
	if p.MemoryMiB, err = t.int(pr.cMem, 0, -1); err != nil {
		return p, err
	}
	if err := pr.gpus(&p); err != nil {
		return p, err
	}
	if spec := t.optional(pr.cSpec); spec != "" {
		s, ok := pr.specs[spec]
		if !ok {
			s = splitSpec(spec)
			pr.specs[spec] = s
		}
		p.GPUSpec = s
		if rs := repeatedSpec(spec); len(rs) > len(s) {
			p.RepeatedSpec = strings.Join(rs, "|")
		}
	}
	p.QoS = t.optional(pr.cQoS)
	p.Phase = t.optional(pr.cPhase)
	if pr.hasTimes {
		if p.Creation, err = t.int(pr.cCreate, 0, -1); err != nil {
			return p, err
		}
		if p.Deletion, err = t.optionalInt(pr.cDelete); err != nil {
			return p, err
		}
		if p.Scheduled, err = t.optionalInt(pr.cSched); err != nil {
			return p, err
		}
	}
	return p, nil
}

// gpus parses num_gpu and gpu_milli into p and checks that they agree: a
// GPU pod has a share, and a pod of several GPUs uses them whole.
func (pr *podReader) gpus(p *TracePod) error {
	t := pr.t
	num, err := t.int(pr.cNum, 0, maxPodGPUs)
	if err != nil {
		return err
	}
	milli, err := t.int(pr.cMilli, 0, fullGPUMilli)
	if err != nil {
		return err
	}
	p.NumGPU, p.GPUMilli = int(num), int(milli)
	switch {
	case p.NumGPU == 0 && p.GPUMilli != 0:
		return t.errf(pr.cMilli, "gpu_milli is %d but num_gpu is 0", p.GPUMilli)
	case p.NumGPU != 0 && p.GPUMilli == 0:
		return t.errf(pr.cMilli, "gpu_milli is 0 but num_gpu is %d", p.NumGPU)
	case p.NumGPU > 1 && p.GPUMilli != fullGPUMilli:
		return t.errf(pr.cMilli, "gpu_milli is %d but a %d-GPU pod must use whole GPUs (1000)", p.GPUMilli, p.NumGPU)
	}
	return nil
}

// chunked collects rows in fixed-size blocks and copies them once at the
// end. Rows are large structs with pointers, and letting append regrow a
// single slice copied several times the final size (with GC write barriers);
// blocks cut the bytes allocated for a 10k-row pod list by about 40%.
type chunked[T any] struct {
	blocks [][]T
	n      int
}

const chunkRows = 1024

func (c *chunked[T]) add(v T) {
	if len(c.blocks) == 0 || len(c.blocks[len(c.blocks)-1]) == chunkRows {
		c.blocks = append(c.blocks, make([]T, 0, chunkRows))
	}
	last := &c.blocks[len(c.blocks)-1]
	*last = append(*last, v)
	c.n++
}

// slice returns the rows in order, in a slice of exactly the right size.
func (c *chunked[T]) slice() []T {
	if len(c.blocks) == 1 {
		return c.blocks[0]
	}
	out := make([]T, 0, c.n)
	for _, b := range c.blocks {
		out = append(out, b...)
	}
	return out
}

// splitSpec splits a gpu_spec value into models, dropping empty parts and
// repeats (the trace has values such as "V100M16|V100M32|V100M32"), and
// returns nil when nothing is left, which means "any model".
func splitSpec(spec string) []string {
	var out []string
	for _, m := range strings.Split(spec, "|") {
		m = strings.TrimSpace(m)
		if m == "" || isNaN(m) {
			continue
		}
		dup := false
		for _, o := range out {
			if o == m {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, m)
		}
	}
	return out
}

// repeatedSpec is splitSpec keeping repeats.
func repeatedSpec(spec string) []string {
	var out []string
	for _, m := range strings.Split(spec, "|") {
		if m = strings.TrimSpace(m); m != "" && !isNaN(m) {
			out = append(out, m)
		}
	}
	return out
}

// isNaN reports whether s is how pandas writes a missing value; the upstream
// README shows empty models that way, so re-exported files may contain it.
func isNaN(s string) bool {
	return len(s) == 3 && strings.EqualFold(s, "nan")
}

// table wraps csv.Reader with header lookup and "source:line:" errors.
type table struct {
	r      *csv.Reader
	source string
	header []string
	col    map[string]int // lower-cased column name -> index
	rec    []string       // current record; reused between rows
	line   int            // line of the current record (or the header)
}

func newTable(rd io.Reader, source string) (*table, error) {
	r := csv.NewReader(rd)
	// ReuseRecord avoids one slice allocation per row. FieldsPerRecord is
	// checked by hand so the error can say which columns are expected.
	r.ReuseRecord = true
	r.FieldsPerRecord = -1
	t := &table{r: r, source: source}
	rec, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s:1: no rows: the file is empty", source)
	}
	if err != nil {
		return nil, t.csvErr(err)
	}
	t.line, _ = r.FieldPos(0)
	t.header = make([]string, len(rec))
	t.col = make(map[string]int, len(rec))
	for i, h := range rec {
		if i == 0 {
			// Spreadsheet exports often start with a UTF-8 byte order mark,
			// which would otherwise become part of the first column name.
			h = strings.TrimPrefix(h, "\uFEFF")
		}
		h = strings.ToLower(strings.TrimSpace(h))
		t.header[i] = h
		if h == "" {
			continue
		}
		if prev, dup := t.col[h]; dup {
			return nil, fmt.Errorf("%s:%d: column %q appears twice (columns %d and %d)", source, t.line, h, prev+1, i+1)
		}
		t.col[h] = i
	}
	return t, nil
}

// require reports every missing column in one error, so fixing a header
// takes one round trip.
func (t *table) require(names ...string) error {
	var missing []string
	for _, n := range names {
		if _, ok := t.col[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s:%d: missing required column(s) %s (header has %s)",
			t.source, t.line, strings.Join(missing, ", "), strings.Join(t.header, ","))
	}
	return nil
}

// next advances to the next record. It returns false at the end of input.
func (t *table) next() (bool, error) {
	rec, err := t.r.Read()
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, t.csvErr(err)
	}
	t.rec = rec
	t.line, _ = t.r.FieldPos(0)
	if len(rec) != len(t.header) {
		return false, fmt.Errorf("%s:%d: row has %d fields, header has %d", t.source, t.line, len(rec), len(t.header))
	}
	return true, nil
}

func (t *table) noRows() error {
	return fmt.Errorf("%s:%d: no rows after the header", t.source, t.line)
}

// csvErr turns a csv.ParseError into the one-line "source:line: msg" form.
func (t *table) csvErr(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s:%d: %v", t.source, pe.Line, pe.Err)
	}
	return fmt.Errorf("%s: %w", t.source, err)
}

// errf formats an error about column c of the current record.
func (t *table) errf(c int, format string, args ...any) error {
	line, _ := t.r.FieldPos(c)
	return fmt.Errorf("%s:%d: %s", t.source, line, fmt.Sprintf(format, args...))
}

func (t *table) field(c int) string {
	if c < 0 {
		return ""
	}
	return strings.TrimSpace(t.rec[c])
}

// name returns a required, non-empty identifier.
func (t *table) name(c int) (string, error) {
	s := t.field(c)
	if s == "" {
		return "", t.errf(c, "%s: value is empty", t.header[c])
	}
	return s, nil
}

// optional returns a free-text field, with pandas' "nan" read as empty.
func (t *table) optional(c int) string {
	s := t.field(c)
	if isNaN(s) {
		return ""
	}
	return s
}

// int parses a required integer in [lo, hi]; hi < 0 means no upper bound.
func (t *table) int(c int, lo, hi int64) (int64, error) {
	s := t.field(c)
	if s == "" {
		return 0, t.errf(c, "%s: value is empty", t.header[c])
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, t.errf(c, "%s: %q is out of range", t.header[c], s)
		}
		return 0, t.errf(c, "%s: %q is not an integer", t.header[c], s)
	}
	if v < lo {
		if lo == 0 {
			return 0, t.errf(c, "%s: %d is negative", t.header[c], v)
		}
		return 0, t.errf(c, "%s: %d is below the minimum %d", t.header[c], v, lo)
	}
	if hi >= 0 && v > hi {
		return 0, t.errf(c, "%s: %d is out of range %d..%d", t.header[c], v, lo, hi)
	}
	return v, nil
}

// optionalInt parses a non-negative integer that may be empty (or "nan"),
// in which case it returns -1.
func (t *table) optionalInt(c int) (int64, error) {
	if s := t.field(c); s == "" || isNaN(s) {
		return -1, nil
	}
	return t.int(c, 0, -1)
}
