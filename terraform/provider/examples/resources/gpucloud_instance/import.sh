# An instance is imported by its ID.
terraform import gpucloud_instance.notebook i-0123456789abcdef
