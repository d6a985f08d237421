package dashboards

import "testing"

func TestMetricsParsed(t *testing.T) {
	ms, err := Metrics()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"gpucloud_http_request_duration_seconds": true, "DCGM_FI_DEV_GPU_UTIL": true, "gpucloud_instances": true}
	n := 0
	for _, m := range ms {
		if want[m] {
			n++
		}
		if m == "gpucloud_http_request_duration_seconds_bucket" {
			t.Errorf("a histogram's bucket series is named by the histogram")
		}
	}
	if n != len(want) {
		t.Errorf("metrics %v lack some of %v", ms, want)
	}
}
