DROP TABLE webhook_endpoint_revision;
DROP TABLE webhook_endpoints;
