"""ROS-free cores (never import rclpy): the stages, the worlds and the maths the nodes wrap."""
