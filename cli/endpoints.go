package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Serverless endpoints (docs/ENDPOINTS.md): the endpoint verbs here, the
// jobs' and the HTTP mode's in endpoint_jobs.go.

// newEndpointCommands returns the endpoints command, bound to root's
// connection flags.
func newEndpointCommands(root *cobra.Command) []*cobra.Command {
	s := &session{}
	cmd := groupCommand("endpoints", "Create and call serverless GPU endpoints",
		"A serverless endpoint serves an image on workers (instances it launches and\n"+
			"releases itself) that scale with its own load: between --min and --max, at\n"+
			"ceil((queued + in flight) / concurrency), down to zero when idle. The first\n"+
			"request to an endpoint at zero starts a worker (a cold start, which describe\n"+
			"measures). In queue mode it takes jobs (run, status, cancel), kept in the\n"+
			"store until a worker has run them; in http mode, plain HTTP requests (call).\n"+
			"Workers bill per second like instances; the queue and the gateway are free.",
		newEndpointsCreateCommand(s), newEndpointsListCommand(s), newEndpointsDescribeCommand(s), newEndpointsUpdateCommand(s),
		newEndpointsDeleteCommand(s), newEndpointsRunCommand(s), newEndpointsJobCommand(s, false), newEndpointsJobCommand(s, true),
		newEndpointsCallCommand(s), newEndpointsKeysCommand(s))
	cmd.Aliases = []string{"endpoint", "ep"}
	bindConnFlags(root, s, cmd)
	return []*cobra.Command{cmd}
}

// endpointID resolves an endpoint given by ID (ep-...) or by name among
// the endpoints the caller sees (resolve); with an endpoint key, which may
// not list them, the name goes to the server as it is.
func (c *conn) endpointID(ctx context.Context, arg string) (string, error) {
	if c.endpointKey {
		return arg, nil
	}
	return c.resolve(ctx, endpointKind, arg)
}

// endpointFlags are the flags that describe an endpoint, shared by create
// and update (which has only those an update can change).
type endpointFlags struct {
	image, healthPath, mode                    string
	offerings, zones, labels, env, volumes     []string
	port, min, max, concurrency, retries       int
	warm                                       int
	idleTimeout, timeout, retention, queueWait time.Duration
	spot                                       bool
	durations                                  []endpointDuration
}

// endpointDuration is a duration flag sent as whole seconds in field.
type endpointDuration struct {
	flag string
	d    *time.Duration
	dst  func(r *api.UpdateEndpointRequest) **int
	spec func(s *cloud.EndpointSpec) *int
}

func (f *endpointFlags) register(cmd *cobra.Command, update bool) {
	fs := cmd.Flags()
	// A create shows the defaults the server fills in; an update sends
	// only the flags given.
	dflt := func(create any) any {
		if update {
			switch create.(type) {
			case string:
				return ""
			case int:
				return 0
			case time.Duration:
				return time.Duration(0)
			}
		}
		return create
	}
	fs.StringVar(&f.image, "image", "", `the OCI image the workers run, e.g. "ghcr.io/acme/echo:1" (its HTTP server answers on --port)`)
	fs.StringArrayVar(&f.offerings, "offering", nil, "an acceptable offering, in order of preference (repeatable; 'gpucloud offerings' lists them)")
	fs.IntVar(&f.min, "min", 0, "the fewest workers (0: scale to zero)")
	fs.IntVar(&f.max, "max", 0, "the most workers (default 3, or --min when larger)")
	fs.IntVar(&f.warm, "warm", 0, "paused workers kept ready beside those the load asks for (0 to --max; containers only; they bill as running)")
	fs.IntVar(&f.concurrency, "concurrency", dflt(1).(int), "requests or jobs one worker takes at once")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", dflt(30*time.Second).(time.Duration), "release a worker idle this long (whole seconds)")
	fs.DurationVar(&f.timeout, "timeout", dflt(10*time.Minute).(time.Duration), "the longest one job or request runs on a worker (whole seconds)")
	fs.IntVar(&f.retries, "retries", dflt(2).(int), "how many times a job whose attempt failed runs again (0 to 10)")
	fs.DurationVar(&f.retention, "retention", dflt(24*time.Hour).(time.Duration), "how long a finished job's result is kept (whole seconds)")
	fs.DurationVar(&f.queueWait, "queue-wait", dflt(30*time.Second).(time.Duration), "http mode: how long a request waits for a free worker before 503 (whole seconds)")
	fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE of the workers (repeatable)")
	fs.StringSliceVar(&f.volumes, "volume", nil, "ID or name of a shared volume every worker mounts read-write (repeatable; a block volume attaches to one instance and is refused)")
	if update {
		fs.Lookup("volume").Usage += "; replaces the list (--volume '' for none)"
		fs.Lookup("env").Usage += "; replaces the whole environment"
		fs.Lookup("offering").Usage += "; replaces the list"
		fs.Lookup("max").Usage = "the most workers"
	} else {
		fs.IntVar(&f.port, "port", 8080, "the TCP port the worker's HTTP server listens on")
		fs.StringVar(&f.healthPath, "health-path", "/health", "the readiness probe: a worker is ready once a GET of it answers 2xx")
		fs.StringVar(&f.mode, "mode", string(cloud.EndpointQueue), "queue (jobs: run, status, cancel) or http (requests: call)")
		fs.BoolVar(&f.spot, "spot", false, "launch workers on spot capacity first, on demand when none fits")
		fs.StringSliceVar(&f.zones, "zone", nil, "an allowed zone (repeatable)")
		fs.StringArrayVar(&f.labels, "label", nil, `host label selector such as "driver>=550" (repeatable)`)
		_ = cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{"queue", "http"}, cobra.ShellCompDirectiveNoFileComp))
	}
	f.durations = []endpointDuration{
		{"idle-timeout", &f.idleTimeout, func(r *api.UpdateEndpointRequest) **int { return &r.IdleTimeoutSeconds },
			func(s *cloud.EndpointSpec) *int { return &s.IdleTimeoutSeconds }},
		{"timeout", &f.timeout, func(r *api.UpdateEndpointRequest) **int { return &r.TimeoutSeconds },
			func(s *cloud.EndpointSpec) *int { return &s.TimeoutSeconds }},
		{"retention", &f.retention, func(r *api.UpdateEndpointRequest) **int { return &r.RetentionSeconds },
			func(s *cloud.EndpointSpec) *int { return &s.RetentionSeconds }},
		{"queue-wait", &f.queueWait, func(r *api.UpdateEndpointRequest) **int { return &r.QueueWaitSeconds },
			func(s *cloud.EndpointSpec) *int { return &s.QueueWaitSeconds }},
	}
}

// wholeSeconds is a duration flag's value in seconds: at least one, and
// whole (the API takes seconds), else a usage error.
func wholeSeconds(cmd *cobra.Command, flag string, d time.Duration) (int, error) {
	switch {
	case d < time.Second:
		return 0, cmdutil.Usagef(cmd, "--%s %s: want a duration of at least 1s, such as 30s or 10m", flag, d)
	case d%time.Second != 0:
		return 0, cmdutil.Usagef(cmd, "--%s %s: want whole seconds, such as %s", flag, d, d.Truncate(time.Second))
	}
	return int(d / time.Second), nil
}

// spec builds the spec of endpoints create from the flags and the command
// after "--" (nil: the image's entrypoint).
func (f *endpointFlags) spec(cmd *cobra.Command, command []string) (cloud.EndpointSpec, error) {
	s := cloud.EndpointSpec{Image: f.image, Command: command, Offerings: f.offerings, Port: f.port, HealthPath: f.healthPath,
		Mode: cloud.EndpointMode(f.mode), Min: f.min, Max: f.max, Concurrency: f.concurrency, Retries: f.retries, Spot: f.spot,
		Warm: f.warm, Zones: f.zones, Labels: f.labels, Volumes: f.volumes}
	if s.Image == "" {
		return s, cmdutil.Usagef(cmd, "--image is required: workers run in containers, an image whose HTTP server answers on --port")
	}
	if len(s.Offerings) == 0 {
		return s, cmdutil.Usagef(cmd, "--offering is required ('gpucloud offerings' lists them; repeat it for fallbacks)")
	}
	if err := checkMode(cmd, f.mode); err != nil {
		return s, err
	}
	for _, d := range f.durations {
		n, err := wholeSeconds(cmd, d.flag, *d.d)
		if err != nil {
			return s, err
		}
		*d.spec(&s) = n
	}
	var err error
	if s.Env, err = keyValues(cmd, "env", f.env); err != nil {
		return s, err
	}
	return s, nil
}

// checkMode refuses a --mode other than queue and http.
func checkMode(cmd *cobra.Command, mode string) error {
	switch cloud.EndpointMode(mode) {
	case cloud.EndpointQueue, cloud.EndpointHTTP:
		return nil
	}
	return cmdutil.Usagef(cmd, "--mode %q: want queue (jobs: run, status, cancel) or http (requests: call)", mode)
}

// patch builds the update of the flags that were given and the command
// after "--"; an update without any is a usage error.
func (f *endpointFlags) patch(cmd *cobra.Command, command []string) (api.UpdateEndpointRequest, error) {
	var req api.UpdateEndpointRequest
	if changed(cmd, "image") {
		req.Image = &f.image
	}
	if changed(cmd, "offering") {
		req.Offerings = &f.offerings
	}
	if command != nil {
		req.Command = &command
	}
	if changed(cmd, "env") {
		env, err := keyValues(cmd, "env", f.env)
		if err != nil {
			return req, err
		}
		req.Env = &env
	}
	if changed(cmd, "volume") {
		vols := slices.DeleteFunc(slices.Clone(f.volumes), func(v string) bool { return v == "" })
		req.Volumes = &vols
	}
	for _, v := range []struct {
		flag string
		n    *int
		dst  **int
	}{{"min", &f.min, &req.Min}, {"max", &f.max, &req.Max}, {"concurrency", &f.concurrency, &req.Concurrency},
		{"retries", &f.retries, &req.Retries}, {"warm", &f.warm, &req.Warm}} {
		if changed(cmd, v.flag) {
			*v.dst = v.n
		}
	}
	for _, d := range f.durations {
		if !changed(cmd, d.flag) {
			continue
		}
		n, err := wholeSeconds(cmd, d.flag, *d.d)
		if err != nil {
			return req, err
		}
		*d.dst(&req) = &n
	}
	if req == (api.UpdateEndpointRequest{}) {
		return req, cmdutil.Usagef(cmd, "nothing to change: give a flag such as --image, --max or --idle-timeout, or a command after \"--\"")
	}
	return req, nil
}

func newEndpointsCreateCommand(s *session) *cobra.Command {
	var (
		f      endpointFlags
		tenant string
		key    string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create NAME --image IMAGE --offering NAME... [flags] [-- COMMAND ARGS...]",
		Short: "Create a serverless endpoint",
		Long: "Create a serverless endpoint: workers run --image (its entrypoint, or the\n" +
			"command after \"--\") on the first of the --offering list that fits, and answer\n" +
			"HTTP on --port; a worker takes requests once a GET of --health-path answers 2xx.\n" +
			"It starts with --min workers (0 by default: the first request starts one).\n\n" +
			"  --mode queue   jobs: 'gpucloud endpoints run NAME --input JSON' (the worker's\n" +
			"                 POST /run gets each job's input and answers its output)\n" +
			"  --mode http    requests: 'gpucloud endpoints call NAME /path'\n\n" +
			"Durations are whole seconds (30s, 10m, 24h). Every call sends an\n" +
			"Idempotency-Key (random unless --idempotency-key is given).",
		Example: strings.Join([]string{
			"  gpucloud endpoints create echo --image ghcr.io/acme/echo:1 --offering l4.1x",
			"  gpucloud endpoints create chat --mode http --image ghcr.io/acme/llm:2 --offering h100.1x --offering l40s.1x \\",
			"      --max 8 --concurrency 4 --idle-timeout 5m --spot --env MODEL=llama -- python serve.py --port 8080",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			names, _ := commandArgs(cmd, args)
			switch {
			case len(names) == 0:
				return cmdutil.Usagef(cmd, "give the endpoint's NAME")
			case len(names) > 1:
				return cmdutil.Usagef(cmd, "unexpected argument %q: put the workers' command after \"--\", e.g. -- python serve.py", names[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			names, command := commandArgs(cmd, args)
			spec, err := f.spec(cmd, command)
			if err != nil {
				return err
			}
			return createResource(s, cmd, &key, &tenant, out.format, func(ctx context.Context, c *conn, key string) (*cloud.Endpoint, error) {
				if spec.Volumes, err = c.resolveAll(ctx, volumeKind, spec.Volumes); err != nil {
					return nil, err
				}
				return c.CreateEndpoint(ctx, api.CreateEndpointRequest{Tenant: tenant, Name: names[0], EndpointSpec: spec}, key)
			}, printEndpoints)
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same endpoint (default: a random UUID)")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

// printEndpoints prints endpoints as a table or as JSON or YAML. WORKERS
// is the workers launched and not released over the count the controller
// last decided.
var printEndpoints = resourceTable[cloud.Endpoint]{
	none:   "no endpoints",
	header: []string{"NAME", "ID", "MODE", "WORKERS", "MIN/MAX", "STATE", "IMAGE"},
	row: func(e *cloud.Endpoint) []string {
		return []string{e.Name, e.ID, string(e.Spec.Mode), fmt.Sprintf("%d/%d", len(e.Status.Workers), e.Status.Desired),
			fmt.Sprintf("%d/%d", e.Spec.Min, e.Spec.Max), string(e.State), clip(e.Spec.Image, 50)}
	},
	tenant: func(e *cloud.Endpoint) string { return e.TenantID },
}.print

func newEndpointsListCommand(s *session) *cobra.Command {
	var (
		all    bool
		tenant string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List endpoints (not deleted ones unless --all)",
		Long: "List the endpoints that are active or deleting; --all adds the deleted ones.\n" +
			"WORKERS is the workers running or starting over the count the controller last\n" +
			"decided; MIN/MAX the bounds it scales within.",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				es, err := c.Endpoints(ctx, t, all)
				if err != nil {
					return c.explain(err)
				}
				if es == nil {
					es = []*cloud.Endpoint{}
				}
				return printEndpoints(cmd.OutOrStdout(), out.format, false, es...)
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "deleted endpoints too")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's endpoints, by name or ID (admins)")
	out.register(cmd)
	return cmd
}

func newEndpointsDescribeCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "describe ENDPOINT",
		Aliases: []string{"show", "get"},
		Short:   "Show an endpoint: its spec, workers, queue, latency, cold starts and cost",
		Long: "Show an endpoint by name or ID: its spec; its workers with their state,\n" +
			"readiness, load, idle time and whether they run an earlier spec; its queue\n" +
			"(jobs queued and running) and the requests in flight on the server replica\n" +
			"that answers; latency percentiles over the last 10 minutes; its latest cold\n" +
			"starts, from the launch to running (placement, image, container) and to ready\n" +
			"(the readiness probe); what its workers cost this month so far (the queue\n" +
			"and the gateway are free); and what the controller decided last and why.\n" +
			"Its workers bill per second as instances, on lines of their own under the\n" +
			"endpoint's name: `gpucloud invoices show`.",
		Example: "  gpucloud endpoints describe echo\n  gpucloud endpoints describe ep-0123456789abcdef -o json",
		Args:    exactArgs(1, endpointKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, args[0])
				if err != nil {
					return err
				}
				d, err := c.GetEndpoint(ctx, id)
				if err != nil {
					return c.explain(err)
				}
				if !out.table() {
					return writeData(cmd.OutOrStdout(), out.format, d)
				}
				return describeEndpoint(cmd.OutOrStdout(), d)
			})
		},
	}
	out.register(cmd)
	return cmd
}

func newEndpointsUpdateCommand(s *session) *cobra.Command {
	var (
		f       endpointFlags
		ifMatch string
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   "update ENDPOINT [flags] [-- COMMAND ARGS...]",
		Short: "Change an endpoint's image, command, sizes or times",
		Long: "Change an endpoint, by name or ID; only the flags given are sent. A new\n" +
			"--image, --offering list, --env, --volume or command after \"--\" rolls the workers over:\n" +
			"new workers start, and each old one goes once it has no request left.",
		Example: strings.Join([]string{
			"  gpucloud endpoints update echo --image ghcr.io/acme/echo:2",
			"  gpucloud endpoints update echo --min 1 --max 10 --idle-timeout 2m",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if names, _ := commandArgs(cmd, args); len(names) != 1 {
				return cmdutil.Usagef(cmd, "%s takes %s, and the workers' command after \"--\"", cmd.CommandPath(), endpointKind.arg())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			var version int64
			if ifMatch != "" {
				v, err := parseIfMatch(ifMatch)
				if err != nil {
					return cmdutil.Usagef(cmd, "%s", strings.Replace(err.Error(), "instance's", "endpoint's", 1))
				}
				version = v
			}
			names, command := commandArgs(cmd, args)
			req, err := f.patch(cmd, command)
			if err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, names[0])
				if err != nil {
					return err
				}
				if req.Volumes != nil {
					if *req.Volumes, err = c.resolveAll(ctx, volumeKind, *req.Volumes); err != nil {
						return err
					}
				}
				e, err := c.UpdateEndpoint(ctx, id, req, version)
				if err != nil {
					return c.explain(err)
				}
				return printEndpoints(cmd.OutOrStdout(), out.format, true, e)
			})
		},
	}
	f.register(cmd, true)
	cmd.Flags().StringVar(&ifMatch, "if-match", "", "change only if the endpoint's version is still this one")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

func newEndpointsDeleteCommand(s *session) *cobra.Command {
	var (
		w   waitFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:     "delete ENDPOINT",
		Aliases: []string{"rm"},
		Short:   "Delete an endpoint and terminate its workers",
		Long: "Delete an endpoint, by name or ID: its queued jobs are cancelled, its workers\n" +
			"terminated, and then it is deleted (its name is free again). Deleting a\n" +
			"deleting or deleted endpoint changes nothing.",
		Example: "  gpucloud endpoints delete echo --wait",
		Args:    exactArgs(1, endpointKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, args[0])
				if err != nil {
					return err
				}
				e, err := c.DeleteEndpoint(ctx, id)
				if err != nil {
					return c.explain(err)
				}
				if w.wait {
					if e, err = c.waitEndpointDeleted(ctx, cmd.ErrOrStderr(), e.ID, w.timeout); err != nil {
						return err
					}
				}
				return printEndpoints(cmd.OutOrStdout(), out.format, true, e)
			})
		},
	}
	cmd.Flags().BoolVar(&w.wait, "wait", false, "wait until the endpoint is deleted (a progress line shows on a terminal)")
	cmd.Flags().DurationVar(&w.timeout, "timeout", defaultWaitTimeout, "with --wait, give up after this long")
	out.register(cmd)
	return cmd
}

// waitEndpointDeleted polls an endpoint until it is deleted, for at most
// timeout, drawing a progress line on a terminal.
func (c *conn) waitEndpointDeleted(ctx context.Context, stderr io.Writer, id string, timeout time.Duration) (*cloud.Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := newProgressLine(stderr)
	defer p.clear()
	for {
		d, err := c.GetEndpoint(ctx, id)
		if err == nil {
			if d.State == cloud.EndpointDeleted {
				return d.Endpoint, nil
			}
			p.show(fmt.Sprintf("%s: %s, %d workers left", id, d.State, len(d.Workers)))
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(pollEvery):
				continue
			}
		}
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("gave up after %s: endpoint %s is not deleted yet; it keeps going (see `gpucloud endpoints describe %s`)", timeout, id, id)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("interrupted: endpoint %s keeps being deleted (see `gpucloud endpoints describe %s`)", id, id)
		}
		return nil, c.explain(err)
	}
}

// secondsText renders a spec's seconds as a duration ("10m0s").
func secondsText(n int) string { return (time.Duration(n) * time.Second).String() }

// describeEndpoint writes the detail view of an endpoint.
func describeEndpoint(w io.Writer, d *api.EndpointDetail) error {
	if err := writeTable(w, endpointFields(d)); err != nil {
		return err
	}
	if err := writeEndpointWorkers(w, d); err != nil {
		return err
	}
	return writeColdStarts(w, d.Status.ColdStarts)
}

// endpointFields are the "Key: value" rows of an endpoint's description.
func endpointFields(d *api.EndpointDetail) fieldRows {
	e, sp := d.Endpoint, d.Endpoint.Spec
	var f fieldRows
	f.add("ID", e.ID)
	f.add("Name", e.Name)
	f.add("Tenant", e.TenantID)
	f.add("State", string(e.State))
	f.add("Mode", string(sp.Mode))
	f.add("Image", sp.Image)
	f.add("Command", cmpOrDash(shellJoin(sp.Command), "(the image's entrypoint)"))
	f.add("Env", dash(joinMap(sp.Env)))
	f.add("Volumes", dash(strings.Join(sp.Volumes, ", ")))
	f.add("Offerings", strings.Join(sp.Offerings, ", "))
	f.add("Port", fmt.Sprintf("%d, ready when GET %s answers 2xx", sp.Port, sp.HealthPath))
	f.add("Workers", fmt.Sprintf("min %d, desired %d, max %d; %d launched, %d ready", sp.Min, e.Status.Desired, sp.Max,
		len(e.Status.Workers), countReady(d.Workers)))
	if sp.Warm > 0 {
		f.add("Warm pool", fmt.Sprintf("%d paused kept (billed as running), %d paused now", sp.Warm, api.PausedWorkers(d.Workers)))
	}
	f.add("Concurrency", fmt.Sprintf("%d per worker", sp.Concurrency))
	f.add("Timing", fmt.Sprintf("idle timeout %s, timeout %s, queue wait %s", secondsText(sp.IdleTimeoutSeconds),
		secondsText(sp.TimeoutSeconds), secondsText(sp.QueueWaitSeconds)))
	f.add("Jobs", fmt.Sprintf("%d retries, results kept %s", sp.Retries, secondsText(sp.RetentionSeconds)))
	market := "on demand"
	if sp.Spot {
		market = "spot, on demand when none fits"
	}
	f.add("Market", market)
	f.add("Zones", dash(strings.Join(sp.Zones, ", ")))
	f.add("Labels", dash(strings.Join(sp.Labels, ", ")))
	f.add("Queue", fmt.Sprintf("%d queued, %d running", d.Queue.Queued, d.Queue.Running))
	f.add("In flight", strconv.Itoa(d.InFlight))
	f.add("Latency", latencyText(d.Latency))
	f.add("Cost", costText(d))
	f.add("Reason", dash(e.Status.Reason))
	if !e.Status.LaunchBlockedUntil.IsZero() {
		f.add("Launches", "blocked until "+stamp(e.Status.LaunchBlockedUntil))
	}
	f.add("Last scale", stamp(e.Status.LastScaleAt))
	f.add("Generation", strconv.FormatInt(e.Status.Generation, 10))
	f.add("Version", strconv.FormatInt(e.Version, 10))
	f.add("Created", stamp(e.CreatedAt))
	f.add("Updated", stamp(e.UpdatedAt))
	return f
}

// costText renders an endpoint's cost so far: "$1.23 so far in 2025-06
// (its workers' lines on the invoice)".
func costText(d *api.EndpointDetail) string {
	if d.Cost == nil {
		if d.CostError != "" {
			return "- (" + d.CostError + ")"
		}
		return "-"
	}
	return money.FormatAmount(*d.Cost) + " so far in " + d.CostMonth + " (its workers' lines on the invoice)"
}

func countReady(ws []api.EndpointWorker) int {
	n := 0
	for _, w := range ws {
		if w.Ready {
			n++
		}
	}
	return n
}

// latencyText renders a latency summary: "p50 12ms, p95 40ms, p99 85ms
// over 120 requests".
func latencyText(l api.EndpointLatency) string {
	if l.Count == 0 {
		return "- (nothing finished in the last 10 minutes)"
	}
	ms := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "ms" }
	return fmt.Sprintf("p50 %s, p95 %s, p99 %s over %d requests (last 10 minutes)", ms(l.P50), ms(l.P95), ms(l.P99), l.Count)
}

// writeEndpointWorkers writes an endpoint's workers, as a table under
// "Workers:".
func writeEndpointWorkers(w io.Writer, d *api.EndpointDetail) error {
	if len(d.Workers) == 0 {
		fmt.Fprintln(w, "Workers: none")
		return nil
	}
	fmt.Fprintln(w, "Workers:")
	rows := [][]string{{"  ID", "NAME", "STATE", "READY", "BUSY", "IDLE", "OUTDATED", "MARKET", "OFFERING", "AGE"}}
	for _, wk := range d.Workers {
		idle := "-"
		if wk.IdleFor != nil {
			idle = time.Duration(*wk.IdleFor * float64(time.Second)).Round(time.Second).String()
		}
		rows = append(rows, []string{"  " + wk.ID, dash(wk.Name), string(wk.State), yesNo(wk.Ready), strconv.Itoa(wk.Busy), idle,
			yesNo(wk.Outdated), dash(wk.Market), wk.Offering, ago(wk.Created)})
	}
	return writeTable(w, rows)
}

// writeColdStarts writes an endpoint's latest cold starts, newest last, as
// a table under "Cold starts:".
func writeColdStarts(w io.Writer, cs []cloud.ColdStart) error {
	if len(cs) == 0 {
		fmt.Fprintln(w, "Cold starts: none")
		return nil
	}
	fmt.Fprintln(w, "Cold starts:")
	rows := [][]string{{"  WORKER", "LAUNCHED", "PLACED", "STARTING", "RUNNING", "READY", "IMAGE"}}
	for _, c := range cs {
		rows = append(rows, []string{"  " + c.Worker, c.LaunchedAt.UTC().Format(time.RFC3339),
			millis(c.ScheduledMillis), millis(c.StartingMillis), millis(c.RunningMillis), millis(c.ReadyMillis), millis(c.ImageMillis)})
	}
	if err := writeTable(w, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "  (from the launch: placed on a host, taken by its agent, container running, first ready probe; IMAGE: of STARTING to RUNNING, the image's part)")
	return err
}

// millis renders a step's milliseconds, "-" where it is not known.
func millis(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
