package autoscale

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// FuzzParseCSV reads demand files (ParseCSV), with the default columns or
// custom ones. A file it refuses gets an error that names it; a series it
// accepts is one the replay takes (Series.Validate), each step's time
// (Series.Time) is the time of its row, and it survives a round trip
// through WriteCSV: the same start, interval and values, bit for bit.
func FuzzParseCSV(f *testing.F) {
	f.Add("time,gpus\n2024-01-01T00:00,1.5\n2024-01-01T00:01,2\n2024-01-01T00:02,0\n", "", "")
	f.Add("ts,x,demand\n2024-01-01T00:00:00+02:00,a,4\n2024-01-01T01:00:00+02:00,b,5\n", "TS", "demand")
	f.Add("\ufeffTime , GPUs\r\n2024-01-01T00:00:00Z,1e3\r\n2024-01-01T00:00:10Z,0.000001\r\n", "", "")
	f.Add("time,gpus\n2024-01-01T00:00:00.5Z,1\n2024-01-01T00:00:01.5Z,2\n", "", "")
	f.Add("time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:01,2\n2024-01-01T00:03,2\n", "", "")
	f.Add("time,gpus\n1700-01-01T00:00,1\n1973-10-17T00:00,2\n2247-08-02T00:00,3\n", "", "")
	f.Add("time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:01,NaN\n", "", "")
	f.Add("time,gpus\n2024-01-01T00:00,1\n\"2024,2\n", "", "")
	f.Add("gpus,time\n1,2024-01-01T00:00\n", "gpus", "gpus")
	f.Fuzz(func(t *testing.T, data, timeCol, valueCol string) {
		opt := CSVOptions{TimeColumn: timeCol, ValueColumn: valueCol}
		s, err := ParseCSV(strings.NewReader(data), "fuzz.csv", opt)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("ParseCSV accepted %q, which the replay refuses: %v", data, err)
		}
		if s.Interval <= 0 || s.Interval%time.Second != 0 {
			t.Fatalf("interval %v", s.Interval)
		}
		for i, v := range s.GPUs {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("step %d: demand %v", i, v)
			}
		}
		// Each step is one interval after the previous one, and the last
		// is where the start and the steps put it.
		last := s.Time(len(s.GPUs) - 1)
		if !last.After(s.Start) || last.Sub(s.Time(len(s.GPUs)-2)) != s.Interval {
			t.Fatalf("series %v + %d × %v: the last step is at %v", s.Start, len(s.GPUs)-1, s.Interval, last)
		}

		var b bytes.Buffer
		if err := WriteCSV(&b, s); err != nil {
			t.Fatal(err)
		}
		back, err := ParseCSV(&b, "back.csv", CSVOptions{})
		if err != nil {
			t.Fatalf("the series of %q, written back, does not load: %v\n%s", data, err, b.String())
		}
		if !back.Start.Equal(s.Start) || back.Interval != s.Interval || len(back.GPUs) != len(s.GPUs) {
			t.Fatalf("round trip of %q: start %v interval %v, %d steps; back: start %v interval %v, %d steps",
				data, s.Start, s.Interval, len(s.GPUs), back.Start, back.Interval, len(back.GPUs))
		}
		for i := range s.GPUs {
			if math.Float64bits(back.GPUs[i]) != math.Float64bits(s.GPUs[i]) {
				t.Fatalf("round trip of %q: step %d is %v, back %v", data, i, s.GPUs[i], back.GPUs[i])
			}
		}
	})
}
