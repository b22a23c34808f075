"""Access: roles for people, scopes and secrets for API tokens, the auth backend, the token
admin and the token services."""
