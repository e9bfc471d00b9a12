-- A validated constraint cannot be made NOT VALID again; 000030's down.sql replaces them.
SELECT 1;
