// Command gpucloud is an open-source GPU cloud in one binary.
package main

import (
	"os"

	"github.com/gpucloud/gpucloud/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
