resource "gpucloud_instance" "web" {
  offering = "l40s.1x"
  command  = ["python", "-m", "http.server", "80"]
}

resource "gpucloud_address" "web" {}

resource "gpucloud_address_association" "web" {
  address_id  = gpucloud_address.web.id
  instance_id = gpucloud_instance.web.id
}
