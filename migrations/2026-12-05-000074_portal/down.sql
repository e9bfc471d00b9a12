DROP TABLE portal_sessions;
DROP TABLE portal_links;
