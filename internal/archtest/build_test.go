package archtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBuildsWithoutCgoElsewhere builds with cgo off (cgo stays in the
// NVML package, which has a build without it): every package for Linux
// and macOS, and the gpucloud command for Windows, where tenants run the
// CLI too. A Linux-only file added without its other-systems twin breaks
// those builds, and nothing else would notice. Off Linux the agent's
// Linux-only parts answer that they need it; on Windows up, the agent and
// the image tools are not in the binary (cli/host_windows.go).
func TestBuildsWithoutCgoElsewhere(t *testing.T) {
	for _, target := range []string{"linux/amd64", "darwin/arm64", "windows/amd64"} {
		goos, goarch, _ := strings.Cut(target, "/")
		pkgs := "./..."
		if goos == "windows" {
			pkgs = "./cmd/gpucloud"
		}
		cmd := exec.Command("go", "build", "-o", os.DevNull, pkgs)
		if pkgs == "./..." {
			cmd = exec.Command("go", "build", pkgs)
		}
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("CGO_ENABLED=0 GOOS=%s GOARCH=%s go build %s: %v\n%s", goos, goarch, pkgs, err, out)
		}
	}
}
