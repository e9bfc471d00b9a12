DROP TABLE provider_transmissions;
