# The spot price of the offering's cheapest pool, and its on-demand price.
data "gpucloud_spot_price" "h100" {
  offering = "h100.1x"
}

output "spot_discount" {
  value = "${data.gpucloud_spot_price.h100.price} (on demand ${data.gpucloud_spot_price.h100.on_demand}) in ${data.gpucloud_spot_price.h100.zone}"
}
