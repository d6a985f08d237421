// Command terraform-provider-gpucloud is gpucloud's Terraform (and
// OpenTofu) provider: a plugin that Terraform starts and speaks to over
// its plugin protocol (version 6). docs/TERRAFORM.md says how to build it
// and point Terraform at it.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/gpucloud/gpucloud/terraform/provider"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run the provider in debug mode (for debuggers such as delve): it prints TF_REATTACH_PROVIDERS")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: provider.Address,
		Debug:   *debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
