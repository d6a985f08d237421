# A one-year reservation of two H100s, paid monthly. It cannot be
# destroyed before its term ends: a plan that would destroy or replace it
# fails until then.
resource "gpucloud_commitment" "h100" {
  plan     = "reservation"
  offering = "h100.1x"
  zone     = "local-a"
  quantity = 2
  term     = "1y"
  payment  = "no_upfront"
  tags     = { team = "ml" }
}

# To stop managing it early without destroying it, remove the resource
# and write instead:
#
# removed {
#   from = gpucloud_commitment.h100
#   lifecycle {
#     destroy = false
#   }
# }
