"""Jinja2 templates for the node side (cloud-init per cloud, boot/launch scripts, systemd units), the
on-node agent (agent/) and the example trainer (train.py). Rendered by infra/userdata.py."""
