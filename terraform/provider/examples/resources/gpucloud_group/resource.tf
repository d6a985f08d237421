# An inference group of 1 to 8 members, a base of two on demand and the
# rest mostly on spot, scaled on a custom queue metric.
resource "gpucloud_group" "serve" {
  name            = "llm-serve"
  offerings       = ["l40s.1x", "h100.1x"]
  image           = "python:3.12"
  command         = ["python", "-m", "http.server", "8000"]
  min             = 1
  max             = 8
  budget_per_hour = "40.00"
  instance_tags   = { app = "llm" }

  spot                 = true
  on_demand_base       = 2
  on_demand_percent    = 25
  max_spot_price_ratio = 70
  capacity_rebalance   = true

  policy {
    name   = "queue"
    type   = "target"
    metric = "custom:queue"
    target = 4
  }

  policy {
    name        = "mornings"
    type        = "scheduled"
    cron        = "0 8 * * 1-5"
    time_zone   = "Europe/Paris"
    set_desired = 2
  }

  timing {
    warmup_seconds        = 120
    stabilization_seconds = 600
  }

  # Members idle under 5% GPU for 15 minutes go, down to min.
  idle_release {
    threshold    = 0.05
    idle_seconds = 900
  }

  wait_for_capacity = true
  timeouts {
    create = "15m"
    update = "15m"
  }
}
