// Command echoworker is the smallest serverless endpoint worker
// (docs/ENDPOINTS.md): an HTTP server on $PORT (8080 by default) that
//
//   - answers GET /health with 200 once it is ready (after
//     $ECHO_READY_AFTER, a Go duration, default 0), 503 before;
//   - runs queue-mode jobs: POST /run with {"id": ..., "input": ...}
//     answers {"echo": input, "job": id, "worker": hostname}; an input
//     object with "sleep_ms" waits that long first, and one with
//     "fail": true answers 500 (the gateway runs the job again);
//   - answers any other request (the HTTP mode) with its method, path,
//     query, headers and body as JSON.
//
// Standard library only, so that a static build is an image's whole
// program.
package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	var readyAfter time.Duration
	if v := os.Getenv("ECHO_READY_AFTER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			log.Fatalf("ECHO_READY_AFTER: %v", err)
		}
		readyAfter = d
	}
	start := time.Now()
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if time.Since(start) < readyAfter {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		var job struct {
			ID    string          `json:"id"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&job); err != nil {
			http.Error(w, "bad job: "+err.Error(), http.StatusBadRequest)
			return
		}
		var opts struct {
			SleepMS int  `json:"sleep_ms"`
			Fail    bool `json:"fail"`
		}
		_ = json.Unmarshal(job.Input, &opts)
		if opts.SleepMS > 0 {
			select {
			case <-time.After(time.Duration(opts.SleepMS) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		if opts.Fail {
			http.Error(w, "asked to fail", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"echo": job.Input, "job": job.ID, "worker": host})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery,
			"header": r.Header, "body": string(body), "worker": host})
	})
	log.Printf("echoworker listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}
