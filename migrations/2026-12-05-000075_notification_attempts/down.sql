DROP TABLE notification_attempts;
