package autoscale

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// CSVOptions name the columns of a demand file.
type CSVOptions struct {
	TimeColumn, ValueColumn string // default "time" and "gpus"
}

// maxSpan is the longest series ParseCSV reads: Series.Time computes a
// step's time as a time.Duration from the start.
const maxSpan = time.Duration(math.MaxInt64)

// timeLayouts are the accepted time formats: RFC 3339 and minutes without
// a zone (read as UTC).
var timeLayouts = []string{time.RFC3339, "2006-01-02T15:04"}

func parseTime(s string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q is neither RFC 3339 (2006-01-02T15:04:05Z) nor 2006-01-02T15:04", s)
}

// ReadCSV reads a demand series from a file (ParseCSV).
func ReadCSV(path string, opt CSVOptions) (Series, error) {
	f, err := os.Open(path)
	if err != nil {
		return Series{}, fmt.Errorf("reading demand: %w", err)
	}
	defer f.Close()
	return ParseCSV(f, path, opt)
}

// ParseCSV reads a demand series: a header naming the time and value
// columns (case-insensitive), then one row per step, times strictly
// increasing at one fixed interval (the first two rows set it). Errors
// name the source and line ("demand.csv:12: ...").
func ParseCSV(r io.Reader, source string, opt CSVOptions) (Series, error) {
	if opt.TimeColumn == "" {
		opt.TimeColumn = "time"
	}
	if opt.ValueColumn == "" {
		opt.ValueColumn = "gpus"
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return Series{}, fmt.Errorf("%s: empty file, want a header with %q and %q", source, opt.TimeColumn, opt.ValueColumn)
	}
	if err != nil {
		return Series{}, fmt.Errorf("%s: %w", source, err)
	}
	ct, cv, err := csvColumns(header, source, opt)
	if err != nil {
		return Series{}, err
	}
	var (
		s        Series
		prev     time.Time
		prevLine int
	)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return Series{}, fmt.Errorf("%s:%d: %v", source, pe.Line, pe.Err)
			}
			return Series{}, fmt.Errorf("%s: %w", source, err)
		}
		line, _ := cr.FieldPos(0)
		if ct >= len(rec) || cv >= len(rec) {
			return Series{}, fmt.Errorf("%s:%d: %d fields, want at least %d", source, line, len(rec), max(ct, cv)+1)
		}
		t, err := parseTime(strings.TrimSpace(rec[ct]))
		if err != nil {
			return Series{}, fmt.Errorf("%s:%d: %v", source, line, err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rec[cv]), 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return Series{}, fmt.Errorf("%s:%d: %s %q is not a non-negative number of GPUs", source, line, opt.ValueColumn, rec[cv])
		}
		switch n := len(s.GPUs); {
		case n == 0:
			s.Start = t
		case t.Equal(prev):
			return Series{}, fmt.Errorf("%s:%d: time %s repeats line %d", source, line, rec[ct], prevLine)
		case t.Before(prev):
			return Series{}, fmt.Errorf("%s:%d: time %s is before line %d's (%s): rows must be sorted by time", source, line, rec[ct], prevLine, prev.Format(time.RFC3339))
		case n == 1:
			s.Interval = t.Sub(prev)
			if !prev.Add(s.Interval).Equal(t) { // Sub saturated
				return Series{}, fmt.Errorf("%s:%d: time %s is more than %v after line %d; a series spans at most that", source, line, rec[ct], maxSpan, prevLine)
			}
			if s.Interval%time.Second != 0 {
				return Series{}, fmt.Errorf("%s:%d: interval %v is not whole seconds", source, line, s.Interval)
			}
		case t.Sub(prev) != s.Interval:
			return Series{}, fmt.Errorf("%s:%d: time %s is %v after line %d, but the series' interval is %v (set by its first two rows); fill gaps or resample",
				source, line, rec[ct], t.Sub(prev), prevLine, s.Interval)
		case s.Interval > maxSpan/time.Duration(n):
			// Series.Time(n) would overflow.
			return Series{}, fmt.Errorf("%s:%d: time %s is more than %v after the first row; a series spans at most that", source, line, rec[ct], maxSpan)
		}
		prev, prevLine = t, line
		s.GPUs = append(s.GPUs, v)
	}
	if len(s.GPUs) < 2 {
		return Series{}, fmt.Errorf("%s: %d data rows, want at least two (they set the interval)", source, len(s.GPUs))
	}
	return s, nil
}

// WriteCSV writes s as "time,gpus" rows, times in RFC 3339 (with the
// fraction of a second of a start that has one, so that ParseCSV reads
// the series back as it was).
func WriteCSV(w io.Writer, s Series) error {
	b := make([]byte, 0, 64*1024)
	b = append(b, "time,gpus\n"...)
	for i, v := range s.GPUs {
		b = s.Time(i).AppendFormat(b, time.RFC3339Nano)
		b = append(b, ',')
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
		b = append(b, '\n')
		if len(b) > 60*1024 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(b)
	return err
}

// csvColumns finds the time and value columns in a demand file's header.
func csvColumns(header []string, source string, opt CSVOptions) (ct, cv int, err error) {
	ct, cv = -1, -1
	var names []string
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		names = append(names, h)
		switch {
		case strings.EqualFold(h, opt.TimeColumn):
			ct = i
		case strings.EqualFold(h, opt.ValueColumn):
			cv = i
		}
	}
	if ct < 0 || cv < 0 {
		missing := opt.TimeColumn
		if ct >= 0 {
			missing = opt.ValueColumn
		}
		return -1, -1, fmt.Errorf("%s:1: no column %q in the header (columns: %s)", source, missing, strings.Join(names, ", "))
	}
	return ct, cv, nil
}
