package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

// The jobs of queue-mode endpoints (run, status, cancel) and the requests
// of HTTP-mode ones (call).

// runSyncSlice is the longest one runsync call waits: the rest of --wait
// polls the job's status, so that no call outlives requestTimeout.
var runSyncSlice = requestTimeout - 10*time.Second

// readInput reads a job's input: --input JSON, or --input-file FILE; "-"
// for either reads stdin. None is JSON null. Input that is not JSON is a
// usage error.
func readInput(cmd *cobra.Command, input, file string) (json.RawMessage, error) {
	if input != "" && file != "" {
		return nil, cmdutil.Usagef(cmd, "--input and --input-file do not mix")
	}
	from, b := "--input", []byte(input)
	switch {
	case input == "-" || file == "-":
		from = "stdin"
		var err error
		if b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20+1)); err != nil {
			return nil, err
		}
	case file != "":
		from = file
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, err
		}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if from == "--input" {
			return nil, nil
		}
		return nil, cmdutil.Usagef(cmd, "the input from %s is empty: want JSON, e.g. {\"prompt\": \"hi\"}", from)
	}
	if !json.Valid(b) {
		return nil, cmdutil.Usagef(cmd, "the input from %s is not JSON, e.g. {\"prompt\": \"hi\"}", from)
	}
	return json.RawMessage(b), nil
}

func newEndpointsRunCommand(s *session) *cobra.Command {
	var (
		input, file, key string
		sync             bool
		wait             time.Duration
		out              outputFlag
	)
	cmd := &cobra.Command{
		Use:   "run ENDPOINT [--input JSON | --input-file FILE | --input -] [--sync [--wait 90s]]",
		Short: "Queue a job on a queue-mode endpoint",
		Long: "Queue a job with its input (any JSON, at most 1 MiB) on a queue-mode endpoint\n" +
			"and print it (its ID and state). A worker's POST /run gets the input and\n" +
			"answers the job's output; a failed attempt runs again up to the endpoint's\n" +
			"retries. With --sync the command waits up to --wait for the job to finish and\n" +
			"prints its output; it exits 1 when the job failed or was cancelled, or has not\n" +
			"finished by then (it keeps going: 'gpucloud endpoints status ENDPOINT JOB').",
		Example: strings.Join([]string{
			`  gpucloud endpoints run echo --input '{"prompt": "hi"}'`,
			`  gpucloud endpoints run echo --input-file job.json --sync --wait 2m`,
			`  echo '{"n": 3}' | gpucloud endpoints run echo --input - --sync`,
		}, "\n"),
		Args: exactArgs(1, endpointKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if changed(cmd, "wait") && !sync {
				return cmdutil.Usagef(cmd, "--wait only applies with --sync")
			}
			if wait < 0 || wait%time.Second != 0 {
				return cmdutil.Usagef(cmd, "--wait %s: want whole seconds, 0 or more, such as 90s", wait)
			}
			in, err := readInput(cmd, input, file)
			if err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, args[0])
				if err != nil {
					return err
				}
				if !sync {
					j, err := c.RunJob(ctx, id, in, key)
					if err != nil {
						return c.explain(err)
					}
					return printJob(cmd.OutOrStdout(), out.format, j)
				}
				j, err := c.runSync(ctx, id, in, key, wait)
				if err != nil {
					return err
				}
				if err := printJob(cmd.OutOrStdout(), out.format, j); err != nil {
					return err
				}
				return jobOutcome(args[0], j, wait)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&input, "input", "", `the job's input, JSON (- reads stdin)`)
	f.StringVar(&file, "input-file", "", "read the job's input from this JSON file (- for stdin)")
	f.BoolVar(&sync, "sync", false, "wait for the job to finish and print its output")
	f.DurationVar(&wait, "wait", 90*time.Second, "with --sync, wait this long at most (whole seconds)")
	f.StringVar(&key, "idempotency-key", "", "retry key: the same key answers the same job instead of queuing another")
	out.register(cmd)
	return cmd
}

// runSync queues a job and waits up to wait for it to finish: one runsync
// call waits up to runSyncSlice, then the job's status is polled.
func (c *conn) runSync(ctx context.Context, id string, in json.RawMessage, key string, wait time.Duration) (*cloud.Job, error) {
	deadline := time.Now().Add(wait)
	j, err := c.RunJobSync(ctx, id, in, min(wait, runSyncSlice), key)
	if err != nil {
		return nil, c.explain(err)
	}
	for !j.State.Finished() {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted: job %s keeps going (see `gpucloud endpoints status %s %s`)", j.ID, id, j.ID)
		case <-time.After(min(pollEvery, left)):
		}
		if j, err = c.JobStatus(ctx, id, j.ID); err != nil {
			return nil, c.explain(err)
		}
	}
	return j, nil
}

// jobOutcome is run --sync's exit: nil for a completed job, else an error
// saying what became of it. The error goes to stderr, the job to stdout.
func jobOutcome(ref string, j *cloud.Job, wait time.Duration) error {
	switch j.State {
	case cloud.JobCompleted:
		return nil
	case cloud.JobFailed, cloud.JobCancelled:
		return fmt.Errorf("job %s %s: %s", j.ID, j.State, cmpOrDash(j.Error, "no reason given"))
	}
	return fmt.Errorf("job %s is still %s after %s; it keeps going (see `gpucloud endpoints status %s %s`)", j.ID, j.State, wait, ref, j.ID)
}

// newEndpointsJobCommand builds status (cancel false) and cancel.
func newEndpointsJobCommand(s *session, cancel bool) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "status ENDPOINT JOB",
		Short:   "Show a job of an endpoint, with its output once finished",
		Long:    "Show a job of a queue-mode endpoint: its state, attempts, worker and times,\nand its output once completed (or why it failed).",
		Example: "  gpucloud endpoints status echo job-0123456789abcdef\n  gpucloud endpoints status echo job-0123456789abcdef -o json",
	}
	if cancel {
		cmd = &cobra.Command{
			Use:   "cancel ENDPOINT JOB",
			Short: "Cancel a job that has not finished",
			Long: "Cancel a job of a queue-mode endpoint: a queued job never runs; a running\n" +
				"one's answer is discarded. A completed or failed job is a conflict.",
			Example: "  gpucloud endpoints cancel echo job-0123456789abcdef",
		}
	}
	cmd.Args = exactArgs(2, "an endpoint ID or name and a job ID")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := out.check(cmd); err != nil {
			return err
		}
		return s.withConn(cmd, func(ctx context.Context, c *conn) error {
			id, err := c.endpointID(ctx, args[0])
			if err != nil {
				return err
			}
			call := c.JobStatus
			if cancel {
				call = c.CancelJob
			}
			j, err := call(ctx, id, args[1])
			if err != nil {
				return c.explain(err)
			}
			return printJob(cmd.OutOrStdout(), out.format, j)
		})
	}
	out.register(cmd)
	return cmd
}

// printJob writes a job as "Key: value" rows with its output (indented
// JSON) after them, or whole in a data format.
func printJob(w io.Writer, format string, j *cloud.Job) error {
	if format != "table" {
		return writeData(w, format, j)
	}
	var f fieldRows
	f.add("ID", j.ID)
	f.add("Endpoint", j.EndpointID)
	f.add("State", string(j.State))
	f.add("Attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts))
	f.add("Worker", dash(j.Worker))
	f.add("Created", stamp(j.CreatedAt))
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"Started", j.StartedAt}, {"Finished", j.FinishedAt}, {"Expires", j.ExpiresAt}} {
		if t.v != nil {
			f.add(t.k, stamp(*t.v))
		}
	}
	if j.Error != "" {
		f.add("Error", j.Error)
	}
	if err := writeTable(w, f); err != nil {
		return err
	}
	if j.State != cloud.JobCompleted {
		return nil
	}
	var b bytes.Buffer
	if err := json.Indent(&b, j.Output, "", "  "); err != nil {
		b.Reset()
		b.Write(j.Output)
	}
	_, err := fmt.Fprintf(w, "Output:\n%s\n", b.String())
	return err
}

func newEndpointsCallCommand(s *session) *cobra.Command {
	var (
		method, data string
		headers      []string
	)
	cmd := &cobra.Command{
		Use:   "call ENDPOINT [PATH] [-X METHOD] [-d DATA] [-H 'KEY: VALUE']...",
		Short: "Send an HTTP request to an HTTP-mode endpoint and print the answer",
		Long: "Send an HTTP request to an HTTP-mode endpoint, as curl would: it goes to a\n" +
			"ready worker with a free slot as PATH (default /), with your token removed.\n" +
			"The body the worker answers is printed as it is. With no worker free within\n" +
			"the endpoint's queue wait (it is scaling up, maybe from zero) the server\n" +
			"answers 503 with Retry-After, which the error shows; so does any other\n" +
			"answer that is not 2xx, and the command exits 1.\n\n" +
			"-d sends DATA as the body (@FILE reads a file, @- stdin), by POST unless -X\n" +
			"says otherwise, as application/json when it is JSON and no -H sets the\n" +
			"Content-Type.",
		Example: strings.Join([]string{
			"  gpucloud endpoints call chat /v1/models",
			`  gpucloud endpoints call chat /v1/completions -d '{"prompt": "hi"}'`,
			"  gpucloud endpoints call chat /items/3 -X DELETE -H 'X-Request-Id: 42'",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return cmdutil.Usagef(cmd, "%s takes %s and, optionally, a PATH", cmd.CommandPath(), endpointKind.arg())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/"
			if len(args) == 2 {
				path = args[1]
			}
			hdr := http.Header{}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, ":")
				if !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(strings.TrimSpace(k), " \t") {
					return cmdutil.Usagef(cmd, "-H %q: want 'KEY: VALUE'", h)
				}
				hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
			var body []byte
			if changed(cmd, "data") {
				var err error
				if body, err = readData(cmd, data); err != nil {
					return err
				}
				if hdr.Get("Content-Type") == "" && json.Valid(body) {
					hdr.Set("Content-Type", "application/json")
				}
			}
			m := strings.ToUpper(method)
			switch {
			case m == "" && changed(cmd, "data"):
				m = http.MethodPost
			case m == "":
				m = http.MethodGet
			case !isProxiedMethod(m):
				return cmdutil.Usagef(cmd, "-X %s: want GET, POST, PUT, PATCH, DELETE or OPTIONS", method)
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, args[0])
				if err != nil {
					return err
				}
				var rd io.Reader
				if body != nil {
					rd = bytes.NewReader(body)
				}
				resp, err := c.EndpointRequest(ctx, id, m, path, rd, hdr)
				if err != nil {
					return callError(c, resp, err)
				}
				defer resp.Body.Close()
				_, err = io.Copy(cmd.OutOrStdout(), resp.Body)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&method, "request", "X", "", "the HTTP method (default GET, or POST with -d)")
	f.StringVarP(&data, "data", "d", "", "the request body (@FILE reads a file, @- stdin)")
	f.StringArrayVarP(&headers, "header", "H", nil, "a request header 'KEY: VALUE' (repeatable)")
	return cmd
}

// isProxiedMethod reports whether the HTTP mode's proxy takes method m.
func isProxiedMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// readData reads -d: DATA as it is, @FILE a file's bytes, @- stdin.
func readData(cmd *cobra.Command, data string) ([]byte, error) {
	name, ok := strings.CutPrefix(data, "@")
	switch {
	case !ok:
		return []byte(data), nil
	case name == "-":
		return io.ReadAll(cmd.InOrStdin())
	}
	return os.ReadFile(name)
}

// callError explains a failed call: the API's error, with the Retry-After
// of a 503 (no worker came free within the endpoint's queue wait).
func callError(c *conn, resp *http.Response, err error) error {
	msg := c.explain(err).Error()
	var ce *cloud.Error
	if resp != nil && resp.StatusCode == http.StatusServiceUnavailable && errors.As(err, &ce) {
		if secs, perr := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); perr == nil && secs >= 0 {
			msg += fmt.Sprintf("; Retry-After: %ds", secs)
		}
	}
	return errors.New(msg)
}
