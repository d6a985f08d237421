terraform {
  required_providers {
    gpucloud = {
      source = "gpucloud/gpucloud"
    }
  }
}

# Every argument may be left out: the endpoint, the token and the CA
# then come from $GPUCLOUD_SERVER, $GPUCLOUD_TOKEN and
# $GPUCLOUD_CA_FINGERPRINT, else from the CLI's configuration file that
# `gpucloud up` and `gpucloud login` write.
provider "gpucloud" {
  endpoint       = "https://gpucloud.example.com:7878"
  token          = var.gpucloud_token
  ca_fingerprint = var.gpucloud_ca_fingerprint
}

variable "gpucloud_token" {
  description = "An API token (gpc_...)."
  type        = string
  sensitive   = true
}

variable "gpucloud_ca_fingerprint" {
  description = "The cloud's CA fingerprint (sha256:...), as `gpucloud up` prints it."
  type        = string
}
