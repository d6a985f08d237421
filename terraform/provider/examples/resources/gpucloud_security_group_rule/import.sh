# A rule is imported by its security group's ID and its own: GROUP_ID/RULE_ID.
terraform import gpucloud_security_group_rule.ssh sg-0123456789abcdef/sgr-0123456789abcdef
