# A spot job with a checkpoint volume: a persistent spot request in the
# cheapest pool of an offering, relaunched after each reclaim with the
# same volume, where the job saves its state (examples/spottrain is such
# a job). Destroy cancels the request and waits until its instance is
# terminated, then deletes the volume. docs/TERRAFORM.md says how to run
# it against `gpucloud up`.

terraform {
  required_providers {
    gpucloud = {
      source = "gpucloud/gpucloud"
    }
  }
}

provider "gpucloud" {}

variable "offering" {
  description = "The instance type (see data.gpucloud_offerings)."
  type        = string
  default     = "h100.1x"
}

variable "image" {
  description = "An image with spottrain on its PATH (see the README); default: the operator's."
  type        = string
  default     = null
}

variable "max_price" {
  description = "The most to pay per instance-hour, a decimal string; default: the pool's on-demand price."
  type        = string
  default     = null
}

# The offering's cheapest spot pool now.
data "gpucloud_spot_price" "pool" {
  offering = var.offering
}

resource "gpucloud_volume" "ckpt" {
  name     = "spot-job-ckpt"
  size_gib = 50
  zone     = data.gpucloud_spot_price.pool.zone
}

resource "gpucloud_spot_request" "job" {
  name         = "spot-job"
  type         = "persistent"
  interruption = "terminate"
  max_price    = coalesce(var.max_price, data.gpucloud_spot_price.pool.on_demand)
  volume_ids   = [gpucloud_volume.ckpt.id]
  image        = var.image
  # A workload with volumes starts in its first (/volumes/ID): the
  # checkpoint lands on the volume.
  command = ["spottrain", "--dir", ".", "--steps", "100000", "--checkpoint-every", "100"]

  pool {
    offering = var.offering
    zone     = data.gpucloud_spot_price.pool.zone
  }

  wait_for_fulfillment = true
  timeouts {
    create = "10m"
  }
}

output "spot_price" {
  value = data.gpucloud_spot_price.pool.price
}

output "instance" {
  value = gpucloud_spot_request.job.instance_id
}
