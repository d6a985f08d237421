# A placement group is imported by its ID.
terraform import gpucloud_placement_group.spread pg-0123456789abcdef
