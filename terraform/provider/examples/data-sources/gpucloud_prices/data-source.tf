# The compute prices of one offering in force now.
data "gpucloud_prices" "h100" {
  kind     = "compute"
  offering = "h100.1x"
}

output "h100_prices" {
  value = { for p in data.gpucloud_prices.h100.prices : coalesce(p.zone, "every zone") => p.amount }
}
