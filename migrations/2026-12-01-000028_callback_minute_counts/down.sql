DROP TABLE callback_minute_state;
DROP TABLE callback_minute_counts;
