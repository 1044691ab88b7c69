// shoal: collectives and SWARM training for distributed deep learning. Include this.
#pragma once

#include "shoal/communicator.hpp"
#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "shoal/types.hpp"
#include "shoal/work.hpp"
