# An autoscaling inference group: the advisor picks the cheapest offering
# that serves a 7B model in int8 and fits now, and a group of 1 to 4
# servers of it scales on the requests waiting per server (a custom
# metric the servers publish: POST /v1/metrics), with one more server on
# weekday mornings, a public address on the first member's zone, and a
# budget. docs/TERRAFORM.md says how to run it against `gpucloud up`.

terraform {
  required_providers {
    gpucloud = {
      source = "gpucloud/gpucloud"
    }
  }
}

provider "gpucloud" {}

variable "image" {
  description = "The inference server's image."
  type        = string
  default     = "python:3.12"
}

# The selection matrix: ranked offerings for the workload, at the
# server's live prices.
variable "command" {
  description = "The inference server's command, listening on port 8000."
  type        = list(string)
  default     = ["python", "-m", "http.server", "8000"]
}

data "gpucloud_advise" "serve" {
  params        = "7B"
  precision     = "int8"
  hours_per_day = 24
  days          = 30
  # Every option (no top): the cheapest few may all be reservations,
  # and the filter below wants the best on-demand one.
}

locals {
  # The best on-demand option: a group's members are on demand here.
  offering = [for o in data.gpucloud_advise.serve.options : o.offering if o.mix == "on_demand"][0]
}

resource "gpucloud_group" "serve" {
  name            = "llm-serve"
  offerings       = [local.offering]
  image           = var.image
  command         = var.command
  min             = 1
  max             = 4
  budget_per_hour = "40"
  instance_tags   = { app = "llm" }

  # Requests waiting per server: hold 4, add half the capacity above,
  # remove a quarter below.
  policy {
    name   = "queue"
    type   = "step"
    metric = "custom:queue"
    target = 4
    step {
      lower          = 0
      change_percent = 50
    }
    step {
      upper          = 0
      change_percent = -25
    }
  }

  # Weekday mornings start with two.
  policy {
    name        = "mornings"
    type        = "scheduled"
    cron        = "0 8 * * 1-5"
    time_zone   = "Europe/Paris"
    set_desired = 2
  }

  timeouts {
    create = "15m"
  }
}

output "offering" {
  value = local.offering
}

output "cost_per_instance_hour" {
  value = [for o in data.gpucloud_advise.serve.options : o.per_instance_hour if o.offering == local.offering && o.mix == "on_demand"][0]
}
