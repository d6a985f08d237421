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

func TestAgent(t *testing.T) {
	for name, agent := range map[string]bool{
		"DCGM_FI_DEV_GPU_UTIL": true, "gpucloud_gpu_xid_errors_total": true, "gpucloud_instance_cpu_seconds_total": true,
		"gpucloud_instance_memory_bytes": true, "gpucloud_gpu_mig_slices": false, "gpucloud_instances": false,
		"gpucloud_instances_pending": false, "gpucloud_tenant_accrued_dollars": false,
	} {
		if Agent(name) != agent {
			t.Errorf("Agent(%s) = %v, want %v", name, !agent, agent)
		}
	}
}
