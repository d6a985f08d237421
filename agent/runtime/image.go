package runtime

import "fmt"

// ImageError is a runtime's refusal of a workload that names an image when
// the runtime cannot run images (the process runtime). Running the command
// on the host instead would run a container's workload with the host's
// files and the agent's user, so the start fails. It wraps ErrInvalid: the
// agent reports the instance failed with this message rather than retry.
type ImageError struct {
	// InstanceID and Image are the refused workload's.
	InstanceID, Image string
	// Host names the host in the message; the runtime leaves it empty and
	// the agent, which knows its host, fills it in.
	Host string
}

func (e *ImageError) Error() string {
	host := "this host"
	if e.Host != "" {
		host = "host " + e.Host
	}
	return fmt.Sprintf("instance %s names image %s, but %s runs workloads as processes, which cannot run images",
		e.InstanceID, e.Image, host)
}

// Unwrap makes the error an ErrInvalid.
func (e *ImageError) Unwrap() error { return ErrInvalid }
