# A key is imported by its ID.
terraform import gpucloud_key.me k-0123456789abcdef
