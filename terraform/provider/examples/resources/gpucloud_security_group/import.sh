# A security group is imported by its ID.
terraform import gpucloud_security_group.cluster sg-0123456789abcdef
