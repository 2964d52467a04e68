"""What the tests share that is not a test: builders and named actors, test job types
and sources, real processes and servers, and the checks the suite runs over the code."""
