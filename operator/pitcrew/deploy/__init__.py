"""Deployment as code: RBAC, the admission policy and the dashboards as data,
rendered into the Helm chart (``pitcrew chart``) and into devcluster installs."""
