# A group is imported by its ID.
terraform import gpucloud_group.serve asg-0123456789abcdef
