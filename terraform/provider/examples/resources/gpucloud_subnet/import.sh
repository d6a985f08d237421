# A subnet is imported by its ID.
terraform import gpucloud_subnet.a subnet-0123456789abcdef
