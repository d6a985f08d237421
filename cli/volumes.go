package cli

import (
	"context"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

func newVolumesCommand(s *session) *cobra.Command {
	cmd := groupCommand("volumes", "Create, list, attach and detach volumes",
		"Volumes are persistent storage of a tenant. A block volume (the default) is\n"+
			"attached to at most one instance at a time; a shared volume (--kind shared) to\n"+
			"any number at once, on any hosts. A volume outlives its instances: terminating\n"+
			"an instance detaches it.",
		newVolumesCreateCommand(s), newVolumesListCommand(s), newVolumesAttachCommand(s), newVolumesDetachCommand(s), newVolumesDeleteCommand(s),
		newVolumesEventsCommand(s), newCopyCommand(s, volumeKind))
	cmd.Aliases = []string{"volume"}
	return cmd
}

// printVolumes prints volumes as a table or as JSON or YAML (one volume as
// an object, several as a list).
var printVolumes = resourceTable[cloud.Volume]{
	none:   "no volumes",
	header: []string{"ID", "NAME", "SIZE", "KIND", "ZONE", "INSTANCE", "AGE"},
	row: func(v *cloud.Volume) []string {
		return []string{v.ID, v.Name, strconv.FormatInt(v.SizeGiB, 10) + " GiB", dash(string(v.Kind)), dash(v.Zone), dash(v.InstanceID), ago(v.CreatedAt)}
	},
	tenant: func(v *cloud.Volume) string { return v.TenantID },
}.print

func newVolumesCreateCommand(s *session) *cobra.Command {
	var (
		req api.CreateVolumeRequest
		key string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create --name NAME --size-gib N",
		Short: "Create a volume",
		Long: "Create a volume of --size-gib GiB, billed per GiB-month from its creation.\n\n" +
			"Every call sends an Idempotency-Key (random unless --idempotency-key is given):\n" +
			"a retry with the same key answers the volume the first call created.",
		Example: "  gpucloud volumes create --name datasets --size-gib 500 --zone a\n" +
			"  # Checkpoints every node of a training stack reads and writes\n" +
			"  gpucloud volumes create --name ckpt --size-gib 200 --kind shared\n" +
			"  # Safe to retry from a script\n" +
			"  gpucloud volumes create --name datasets --size-gib 500 --idempotency-key datasets-1",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if req.Name == "" {
				return cmdutil.Usagef(cmd, "--name is required")
			}
			if req.SizeGiB <= 0 {
				return cmdutil.Usagef(cmd, "--size-gib is required and must be positive")
			}
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.Volume, error) {
					return c.CreateVolume(ctx, req, key)
				},
				printVolumes)
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "the volume's name; required")
	cmd.Flags().Int64Var(&req.SizeGiB, "size-gib", 0, "size in GiB; required")
	cmd.Flags().StringVar((*string)(&req.Kind), "kind", "block", "block (one instance at a time) or shared (many instances on many hosts at once; needs hosts with a shared volume directory)")
	cmd.Flags().StringVar(&req.Zone, "zone", "", "the zone to create it in (instances using it must be allowed there)")
	cmd.Flags().StringVar(&req.Tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same volume (default: a random UUID)")
	out.register(cmd)
	return cmd
}

func newVolumesListCommand(s *session) *cobra.Command {
	return newTenantListCommand(s, "volumes", "List volumes: members their tenant's, admins every tenant's or one tenant's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Volume, error) { return c.Volumes(ctx, t) }, printVolumes)
}

func newVolumesAttachCommand(s *session) *cobra.Command {
	return newToInstanceCommand(s, &cobra.Command{
		Use:     "attach VOLUME --instance ID",
		Short:   "Attach a detached volume to an instance",
		Example: "  gpucloud volumes attach v-0123456789abcdef --instance i-0123456789abcdef",
	}, volumeKind, "the instance to attach it to; required",
		func(ctx context.Context, c *conn, id, instance string) (*cloud.Volume, error) {
			return c.AttachVolume(ctx, id, instance)
		}, printVolumes)
}

func newVolumesDetachCommand(s *session) *cobra.Command {
	return newIDCommand(s, &cobra.Command{
		Use:   "detach VOLUME",
		Short: "Detach a volume from its instance",
		Long:  "Detach a volume from its instance; detaching a detached volume changes nothing.",
	}, volumeKind, func(ctx context.Context, c *conn, id string) (*cloud.Volume, error) { return c.DetachVolume(ctx, id) }, asOne(printVolumes))
}

func newVolumesDeleteCommand(s *session) *cobra.Command {
	return newIDCommand(s, &cobra.Command{
		Use:     "delete VOLUME",
		Aliases: []string{"rm"},
		Short:   "Delete a volume: its data is gone and its storage stops being billed",
		Long: "Delete a volume. A volume attached to an instance that is not terminated, or\n" +
			"named by a spot request that may still launch, is refused: detach it or cancel\n" +
			"the request first. Deleting a deleted volume changes nothing.",
		Example: "  gpucloud volumes delete v-0123456789abcdef",
	}, volumeKind, func(ctx context.Context, c *conn, id string) (*cloud.Volume, error) { return c.DeleteVolume(ctx, id) }, asOne(printVolumes))
}

func newVolumesEventsCommand(s *session) *cobra.Command {
	return newEventsCommand(s, &cobra.Command{
		Use:   "events VOLUME",
		Short: "Show a volume's events, oldest first",
		Long: "Show every event of a volume, oldest first: its creation, attachments,\n" +
			"detachments and deletion; each copy into or out of it while it was detached\n" +
			"(who, through which host, how long); and what the hosts reported of its direct\n" +
			"copies (connections, bytes, duration). A copy while it is attached is a session\n" +
			"of its instance: see \"gpucloud instances events\". A deleted volume's events\n" +
			"stay readable.",
		Example: "  gpucloud volumes events v-0123456789abcdef\n  gpucloud volumes events datasets -o json",
	}, volumeKind, (*conn).allVolumeEvents)
}
