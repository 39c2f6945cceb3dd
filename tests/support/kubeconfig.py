"""A kubeconfig whose API server nobody answers (https://127.0.0.1:1, TLS unverified, a bearer token):
for the kubernetes backend's tests that need a configured cluster but no real one."""

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
  - name: c
    cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
  - name: u
    user: {token: sekrit-token}
contexts:
  - name: ctx
    context: {cluster: c, user: u, namespace: default}
current-context: ctx
"""
