# An address is imported by its ID.
terraform import gpucloud_address.web eip-0123456789abcdef
