package advise

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Task is what the workload does with the model.
type Task string

const (
	// Training updates every weight with Adam: weights, gradients and
	// optimizer state live in GPU memory.
	Training Task = "training"
	// Inference serves or evaluates a trained model: weights plus the KV
	// cache and activations.
	Inference Task = "inference"
)

// ParseTask reads a task as a user writes it: "train", "training",
// "inference", "infer" or "serve", in any case.
func ParseTask(s string) (Task, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "train", "training":
		return Training, nil
	case "inference", "infer", "serve", "serving":
		return Inference, nil
	}
	return "", fmt.Errorf("%q is not a task: want train or inference", s)
}

// Precision is the number format the model computes in (training) or
// whose weights it holds (inference).
type Precision string

const (
	FP32 Precision = "fp32"
	TF32 Precision = "tf32"
	BF16 Precision = "bf16"
	FP16 Precision = "fp16"
	FP8  Precision = "fp8"
	INT8 Precision = "int8"
	INT4 Precision = "int4"
)

// Precisions lists the precisions in order of width, widest first.
var Precisions = []Precision{FP32, TF32, BF16, FP16, FP8, INT8, INT4}

// ParsePrecision reads a precision in any case; "float16", "half" and
// "bfloat16" are accepted too.
func ParsePrecision(s string) (Precision, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch v {
	case "float32":
		v = "fp32"
	case "float16", "half":
		v = "fp16"
	case "bfloat16":
		v = "bf16"
	}
	for _, p := range Precisions {
		if string(p) == v {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q is not a precision: want one of %s", s, precisionList())
}

func precisionList() string {
	names := make([]string, len(Precisions))
	for i, p := range Precisions {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

// bytesPerParamTenths is the size of one weight in tenths of a byte, so
// that int4's half byte stays an integer.
func (p Precision) bytesPerParamTenths() int64 {
	switch p {
	case FP32, TF32:
		return 40
	case BF16, FP16:
		return 20
	case FP8, INT8:
		return 10
	case INT4:
		return 5
	}
	return 0
}

// trainable reports whether full training in p is a thing: int8 and int4
// are inference formats (quantized weights).
func (p Precision) trainable() bool { return p != INT8 && p != INT4 }

// Limits of a Workload. They keep every product within 64 bits and the
// advice within what gpucloud can sell: a commitment's term is at most
// three years, so is the workload.
const (
	// MaxParams is 100 trillion parameters.
	MaxParams int64 = 100_000_000_000_000
	// MaxMemoryMiB is 1 PiB of GPU memory.
	MaxMemoryMiB int64 = 1 << 30
	// MaxNodes bounds a distributed job.
	MaxNodes = 1024
	// MaxDays is three years, the longest commitment term.
	MaxDays = 1095
	// MaxCheckpointInterval is a week.
	MaxCheckpointInterval = 7 * 24 * time.Hour
	// MaxScratchGiB is the largest instance store an offering may have
	// (15 TiB, catalog's limit).
	MaxScratchGiB int64 = 15 * 1024
)

// Workload is what the tenant wants to run. The zero values of the
// optional fields (MemoryMiB or Params, CheckpointInterval, Deadline,
// Budget) mean "not given".
type Workload struct {
	// Params is the model's parameter count: 7_000_000_000 for a 7B
	// model (ParseParams reads "7B"). It sizes GPU memory unless
	// MemoryMiB is given, and always sizes the checkpoint volume.
	Params int64 `json:"params,omitempty"`
	// MemoryMiB is the GPU memory the whole job needs, when the tenant
	// knows it better than the rule of thumb does (a measured peak, a
	// LoRA fine-tune, a long context). It wins over Params for fitting.
	MemoryMiB int64 `json:"memory_mib,omitempty"`
	// Precision is what the model computes in (training) or holds its
	// weights in (inference); int8 and int4 are inference only.
	Precision Precision `json:"precision"`
	Task      Task      `json:"task"`
	// Nodes is how many instances run the job together. One is a
	// single-node job; more is one distributed job whose state is
	// sharded over all of them (FSDP/ZeRO-3, tensor or pipeline
	// parallel), which needs an InfiniBand/RoCE-class offering.
	Nodes int `json:"nodes"`
	// PerDay is how long the job runs each day, 1s..24h in whole
	// seconds, for Days days. The advisor does not model speed: this
	// schedule is what is rented, whatever the GPU.
	PerDay time.Duration `json:"-"`
	Days   int           `json:"days"`
	// CheckpointInterval is how often the job saves its state. Zero
	// means it cannot be interrupted, which rules spot out; otherwise a
	// reclaim loses half of it on average.
	CheckpointInterval time.Duration `json:"-"`
	// Deadline, when set, is how long after the start the work must be
	// done; options expected to finish later (spot reclaims included)
	// are excluded.
	Deadline time.Duration `json:"-"`
	// Budget, when set, is the most the whole workload may cost;
	// options over it are excluded.
	Budget money.Micros `json:"budget,omitempty"`
	// ScratchGiB, when set, is the local disk the job needs on each node
	// (a staged dataset, a compile cache): offerings whose instance store
	// (catalog.Offering.InstanceStoreGiB, at /scratch, wiped at stop) is
	// smaller are excluded.
	ScratchGiB int64 `json:"scratch_gib,omitempty"`
}

// workloadJSON is a Workload on the wire: durations in whole seconds, as
// the API's other types carry them.
type workloadJSON struct {
	workloadFields
	PerDaySeconds             int64 `json:"per_day_seconds"`
	CheckpointIntervalSeconds int64 `json:"checkpoint_interval_seconds,omitempty"`
	DeadlineSeconds           int64 `json:"deadline_seconds,omitempty"`
}

// workloadFields is Workload without its methods, so that workloadJSON's
// embedding does not recurse into MarshalJSON.
type workloadFields Workload

// MarshalJSON writes the durations as whole seconds: per_day_seconds,
// checkpoint_interval_seconds and deadline_seconds.
func (w Workload) MarshalJSON() ([]byte, error) {
	return json.Marshal(workloadJSON{workloadFields: workloadFields(w), PerDaySeconds: int64(w.PerDay / time.Second),
		CheckpointIntervalSeconds: int64(w.CheckpointInterval / time.Second), DeadlineSeconds: int64(w.Deadline / time.Second)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (w *Workload) UnmarshalJSON(b []byte) error {
	var v workloadJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*w = Workload(v.workloadFields)
	w.PerDay = time.Duration(v.PerDaySeconds) * time.Second
	w.CheckpointInterval = time.Duration(v.CheckpointIntervalSeconds) * time.Second
	w.Deadline = time.Duration(v.DeadlineSeconds) * time.Second
	return nil
}

// Interruptible reports whether the workload survives a reclaim.
func (w *Workload) Interruptible() bool { return w.CheckpointInterval > 0 }

// RunSeconds is the running time the workload rents per instance: PerDay
// for Days days.
func (w *Workload) RunSeconds() int64 { return int64(w.PerDay/time.Second) * int64(w.Days) }

// fieldError is the *cloud.Error of one field, as the domain services
// word them: an invalid_argument naming the field in Details.
func fieldError(field, format string, args ...any) error {
	return &cloud.Error{Code: cloud.Invalid, Message: field + ": " + fmt.Sprintf(format, args...),
		Details: map[string]any{"field": field}}
}

// Workload field names, as Validate's errors name them in Details.
const (
	FieldParams             = "params"
	FieldMemoryMiB          = "memory_mib"
	FieldPrecision          = "precision"
	FieldTask               = "task"
	FieldNodes              = "nodes"
	FieldPerDay             = "per_day"
	FieldDays               = "days"
	FieldCheckpointInterval = "checkpoint_interval"
	FieldDeadline           = "deadline"
	FieldBudget             = "budget"
	FieldScratchGiB         = "scratch_gib"
)

// Validate reports every field out of range, each as a *cloud.Error with
// code invalid_argument and Details["field"] naming the field (the Field*
// constants), joined with errors.Join.
func (w *Workload) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fieldError(field, format, args...))
	}
	switch {
	case w.Params == 0 && w.MemoryMiB == 0:
		add(FieldParams, "give the model's parameters (e.g. 7B) or the GPU memory it needs")
	case w.Params < 0 || w.Params > MaxParams:
		add(FieldParams, "must be 1..%s parameters, got %d", FormatParams(MaxParams), w.Params)
	}
	if w.MemoryMiB < 0 || w.MemoryMiB > MaxMemoryMiB {
		add(FieldMemoryMiB, "must be 1..%d MiB, got %d", MaxMemoryMiB, w.MemoryMiB)
	}
	switch {
	case w.Precision == "":
		add(FieldPrecision, "is required: one of %s", precisionList())
	case w.Precision.bytesPerParamTenths() == 0:
		add(FieldPrecision, "%q is not a precision: want one of %s", w.Precision, precisionList())
	case w.Task == Training && !w.Precision.trainable():
		add(FieldPrecision, "%s is an inference format (quantized weights), not a training precision: "+
			"train in fp32, tf32, bf16, fp16 or fp8, or give the memory a quantized fine-tune needs", w.Precision)
	}
	if w.Task != Training && w.Task != Inference {
		add(FieldTask, "%q is not a task: want %s or %s", w.Task, Training, Inference)
	}
	if w.Nodes < 1 || w.Nodes > MaxNodes {
		add(FieldNodes, "must be 1..%d, got %d", MaxNodes, w.Nodes)
	}
	switch {
	case w.PerDay <= 0 || w.PerDay > 24*time.Hour:
		add(FieldPerDay, "must be more than 0 and at most 24h a day, got %s", w.PerDay)
	case w.PerDay%time.Second != 0:
		add(FieldPerDay, "%s is not a whole number of seconds", w.PerDay)
	}
	if w.Days < 1 || w.Days > MaxDays {
		add(FieldDays, "must be 1..%d (three years, the longest commitment), got %d", MaxDays, w.Days)
	}
	switch {
	case w.CheckpointInterval < 0 || w.CheckpointInterval > MaxCheckpointInterval:
		add(FieldCheckpointInterval, "must be 0 (cannot be interrupted) up to %s, got %s", MaxCheckpointInterval, w.CheckpointInterval)
	case w.CheckpointInterval%time.Second != 0:
		add(FieldCheckpointInterval, "%s is not a whole number of seconds", w.CheckpointInterval)
	}
	switch {
	case w.Deadline < 0 || w.Deadline > time.Duration(MaxDays+MaxDays)*24*time.Hour:
		add(FieldDeadline, "must be 0 (none) up to %d days, got %s", 2*MaxDays, w.Deadline)
	case w.Deadline%time.Second != 0:
		add(FieldDeadline, "%s is not a whole number of seconds", w.Deadline)
	}
	if w.Budget < 0 {
		add(FieldBudget, "must not be negative, got %s", w.Budget)
	}
	if w.ScratchGiB < 0 || w.ScratchGiB > MaxScratchGiB {
		add(FieldScratchGiB, "must be 0 (none) up to %d GiB (the largest instance store), got %d", MaxScratchGiB, w.ScratchGiB)
	}
	return errors.Join(errs...)
}

// ParseParams reads a parameter count: a decimal with an optional suffix
// K, M, B (or G) or T, in any case: "7B" is 7,000,000,000, "1.5b" is
// 1,500,000,000, "350M" 350,000,000, "70000000000" itself. The result
// must be a whole, positive number of parameters.
func ParseParams(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty parameter count: want e.g. 7B, 350M or 1.5T")
	}
	scale := int64(1)
	switch t[len(t)-1] {
	case 'k', 'K':
		scale = 1_000
	case 'm', 'M':
		scale = 1_000_000
	case 'b', 'B', 'g', 'G':
		scale = 1_000_000_000
	case 't', 'T':
		scale = 1_000_000_000_000
	}
	if scale > 1 {
		t = strings.TrimSpace(t[:len(t)-1])
	}
	whole, frac, hasFrac := strings.Cut(t, ".")
	bad := func() (int64, error) {
		return 0, fmt.Errorf("%q is not a parameter count: want e.g. 7B, 350M or 1.5T", s)
	}
	if whole == "" && (!hasFrac || frac == "") || !digits(whole) || !digits(frac) {
		return bad()
	}
	if len(whole) > 15 || len(frac) > 12 {
		return bad()
	}
	n := int64(0)
	if whole != "" {
		n, _ = strconv.ParseInt(whole, 10, 64)
	}
	if n > MaxParams/scale {
		return 0, fmt.Errorf("%q: more than %s parameters", s, FormatParams(MaxParams))
	}
	n *= scale
	unit := scale
	for _, c := range frac {
		unit /= 10
		if unit == 0 {
			if c != '0' {
				return 0, fmt.Errorf("%q is not a whole number of parameters", s)
			}
			continue
		}
		n += int64(c-'0') * unit
	}
	if n <= 0 {
		return 0, fmt.Errorf("%q: a model has at least one parameter", s)
	}
	return n, nil
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// FormatParams prints a parameter count the way models are named: "7B",
// "1.5B", "350M", "13K", "42".
func FormatParams(n int64) string {
	for _, u := range []struct {
		scale  int64
		suffix string
	}{{1_000_000_000_000, "T"}, {1_000_000_000, "B"}, {1_000_000, "M"}, {1_000, "K"}} {
		if n >= u.scale {
			return decimal(n, u.scale, 2) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// decimal prints v/unit with at most places decimals, truncated, without
// trailing zeros: decimal(1_500, 1_000, 2) is "1.5".
func decimal(v, unit int64, places int) string {
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	s := sign + strconv.FormatInt(v/unit, 10)
	rem := v % unit
	var frac []byte
	for i := 0; i < places && rem != 0; i++ {
		// rem < unit ≤ 10¹², so rem×10 cannot overflow.
		rem *= 10
		frac = append(frac, byte('0'+rem/unit))
		rem %= unit
	}
	for len(frac) > 0 && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	if len(frac) > 0 {
		s += "." + string(frac)
	}
	return s
}
