data "gpucloud_spot_price" "h100" {
  offering = "h100.1x"
}

# A persistent request: launched again after each reclaim, in the first
# pool that has room at no more than max_price.
resource "gpucloud_spot_request" "train" {
  name         = "train"
  type         = "persistent"
  interruption = "terminate"
  max_price    = data.gpucloud_spot_price.h100.on_demand
  command      = ["python", "train.py", "--resume"]

  pool {
    offering = "h100.1x"
    zone     = data.gpucloud_spot_price.h100.zone
  }
  pool {
    offering = "l40s.1x"
  }

  wait_for_fulfillment = true
  timeouts {
    create = "20m"
  }
}
