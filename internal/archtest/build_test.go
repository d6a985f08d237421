package archtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBuildsWithoutCgoElsewhere builds every package with cgo off (cgo
// stays in the NVML package, which has a build without it) for Linux and
// for macOS, where tenants run the CLI: a Linux-only file added without
// its other-systems twin breaks the macOS build, and nothing else would
// notice. The agent's Linux-only parts answer off Linux that they need it.
func TestBuildsWithoutCgoElsewhere(t *testing.T) {
	for _, target := range []string{"linux/amd64", "darwin/arm64"} {
		goos, goarch, _ := strings.Cut(target, "/")
		cmd := exec.Command("go", "build", "./...")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("CGO_ENABLED=0 GOOS=%s GOARCH=%s go build ./...: %v\n%s", goos, goarch, err, out)
		}
	}
}
