DROP TABLE orders;
DROP TABLE api_tokens;
