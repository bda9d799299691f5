"""The system service: answers what is running, where, and on which stores."""
