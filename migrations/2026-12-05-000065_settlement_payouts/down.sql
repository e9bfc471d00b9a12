DROP TABLE settlement_payouts;
