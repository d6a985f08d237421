variable "ssh_public_key" {
  description = "An OpenSSH public key (ssh-ed25519 AAAA... me@laptop)."
  type        = string
}

resource "gpucloud_key" "me" {
  public_key = var.ssh_public_key
  name       = "me"
}
