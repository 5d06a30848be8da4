"""System identification (ROS-free): probes, fits of arm and object parameters, bags and the stage.
"""
